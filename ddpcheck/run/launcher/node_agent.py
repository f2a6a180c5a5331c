"""One more node of a `--nodes N` job: a torchrun agent in a process of its own on this machine.

`ddpcheck run --nodes N` runs the first node's agent in its own process (as for every job) and
starts N-1 of these, each `python -m ddpcheck.run.launcher.node_agent ARGS_FILE OUT_FILE`: torchrun's
parsed arguments (the same for every node: c10d rendezvous on loopback, `--nnodes N`) are read
from ARGS_FILE, and the global ranks that failed on this node, with their exit codes, are written
to OUT_FILE as JSON. The agent dies with `ddpcheck run`, and its workers with it (ddpcheck/run/parent.py).
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from typing import Any


def main(argv: list[str]) -> int:
    from ddpcheck.run.run_options import ENV_LAUNCHER_PID, RunOptions
    from ddpcheck.run import parent

    args_file, out_file = argv
    parent.die_with_parent()  # armed against `ddpcheck run`, whose pid the environment holds
    os.environ[ENV_LAUNCHER_PID] = str(os.getpid())  # this agent's workers guard against it
    with open(args_file, "rb") as fh:
        torchrun_args: Any = pickle.load(fh)

    # The rendezvous store lives in the first node's agent, which leaves when its ranks are done:
    # this agent's last rendezvous call then finds it gone, and c10d prints a C++ warning with a
    # stack trace. The level is read once, as torch is imported: the ranks keep the user's.
    saved = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    import torch  # noqa: F401

    if saved is None:
        os.environ.pop("TORCH_CPP_LOG_LEVEL")
    else:
        os.environ["TORCH_CPP_LOG_LEVEL"] = saved
    from torch.distributed import run as torch_distributed_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from ddpcheck.run.launcher import launcher_log

    torchrun: Any = torch_distributed_run.run  # untyped in torch
    options = RunOptions.from_env() or RunOptions()
    failed: dict[str, int] = {}
    error: str | None = None
    try:
        # Every agent's torchrun log lines go to the one log file of the run.
        with launcher_log.captured(options.record_dir, verbose=options.verbose):
            torchrun(torchrun_args)
    except ChildFailedError as exc:
        failed = {str(rank): int(f.exitcode) for rank, f in exc.failures.items()}
    except (ValueError, AssertionError, RuntimeError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # noqa: BLE001 - torchrun's SignalException: stopped by the launcher
        error = f"{type(exc).__name__}: {exc}"
    with open(out_file + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({"failed": failed, "error": error}, fh)
    os.replace(out_file + ".tmp", out_file)
    return 0 if not failed and error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
