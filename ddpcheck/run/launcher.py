"""Launch the user's job through PyTorch's own launcher, `torch.distributed.run` (torchrun).

We parse the command line with torchrun's own parser (so every torchrun option and its
environment-variable form passes through unchanged), add ddpcheck's options to it, then swap the
training program for our bootstrap module and call `torch.distributed.run.run(args)` in this
process, exactly as Lightning's and Accelerate's launchers do. Never a hand-written process pool.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ddpcheck.errors import UserError
from ddpcheck.run.options import CONFIG_ENV, RunOptions, add_own_options, own_options_from

BOOTSTRAP = "ddpcheck.run.bootstrap"
_RDZV_FLAGS = ("--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
               "--master-port", "--master_port", "--master-addr", "--master_addr", "--standalone")
_NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
DEFAULT_NPROC = "2"


@dataclass(frozen=True)
class Target:
    """What each rank runs: a script path (absolute) or a module name, and its arguments."""

    kind: str  # "script" or "module"
    name: str
    args: tuple[str, ...]

    def bootstrap_args(self) -> list[str]:
        return ["--" + self.kind, self.name, *self.args]


@dataclass(frozen=True)
class Launch:
    torchrun_args: object  # the argparse.Namespace torchrun's run() takes
    target: Target
    options: RunOptions
    nproc: int
    nnodes_max: int


def _parser():
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "ddpcheck run"
    parser.description = "Run a DDP training script on torchrun and check it across ranks."
    add_own_options(parser)

    def error(message: str):  # argparse would print usage and sys.exit(2); we say one line
        raise UserError(f"ddpcheck run: {message} (see `ddpcheck run --help`)")

    parser.error = error
    return parser


def _given(argv_before_script: list[str], flags: tuple[str, ...]) -> bool:
    return any(a == f or a.startswith(f + "=") for a in argv_before_script for f in flags)


def parse(argv: list[str], record_dir: str) -> Launch:
    """Split `argv` into torchrun's options, ours, and the target; validate all of it."""
    parser = _parser()
    ns = parser.parse_args(argv)
    # Options before the script are launcher options; everything after it belongs to the script.
    n_before = len(argv) - len(ns.training_script_args) - 1
    before = argv[:n_before]

    if ns.no_python or ns.run_path:
        flag = "--no-python" if ns.no_python else "--run-path"
        raise UserError(f"ddpcheck run: {flag} is not supported: each rank must start Python with "
                        "ddpcheck's bootstrap; drop the flag")
    if ns.ddpcheck_nproc is not None and (_given(before, _NPROC_FLAGS) or os.environ.get("PET_NPROC_PER_NODE")):
        raise UserError("ddpcheck run: give either --nproc or --nproc-per-node, not both")
    if ns.ddpcheck_nproc is not None:
        ns.nproc_per_node = str(ns.ddpcheck_nproc)
    elif not _given(before, _NPROC_FLAGS) and not os.environ.get("PET_NPROC_PER_NODE"):
        ns.nproc_per_node = DEFAULT_NPROC
    try:
        from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

        nproc = determine_local_world_size(ns.nproc_per_node)
        _, nnodes_max = parse_min_max_nnodes(ns.nnodes)
    except (ValueError, RuntimeError) as exc:
        raise UserError(f"ddpcheck run: bad --nproc/--nproc-per-node or --nnodes: {exc}") from None

    options = own_options_from(ns, record_dir)

    if ns.module:
        target = Target("module", ns.training_script, tuple(ns.training_script_args))
    else:
        path = os.path.abspath(ns.training_script)
        if not os.path.isfile(path):
            raise UserError(f"ddpcheck run: {ns.training_script}: no such script; give a path to a "
                            "Python file or -m MODULE")
        target = Target("script", path, tuple(ns.training_script_args))

    # Single node and no rendezvous chosen: a standalone c10d rendezvous on loopback with a free
    # port, so two jobs on one machine never collide (torchrun's own --standalone).
    if nnodes_max == 1 and not _given(before, _RDZV_FLAGS) and not any(
        os.environ.get(v) for v in ("PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_MASTER_PORT")
    ):
        ns.standalone = True

    for own in [k for k in vars(ns) if k.startswith("ddpcheck_")]:
        delattr(ns, own)
    ns.module = True
    ns.training_script = BOOTSTRAP
    ns.training_script_args = target.bootstrap_args()
    return Launch(ns, target, options, nproc, nnodes_max)


def _ensure_importable_in_workers() -> None:
    """Workers run `python -m ddpcheck.run.bootstrap`: make sure they find this very ddpcheck."""
    import ddpcheck

    root = os.path.dirname(os.path.dirname(os.path.abspath(ddpcheck.__file__)))
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root in (os.path.abspath(p) for p in entries) or root in sys.path[1:] and "site-packages" in root:
        return
    os.environ["PYTHONPATH"] = os.pathsep.join([*entries, root])


@dataclass(frozen=True)
class JobResult:
    ok: bool
    exit_codes: dict[int, int]  # global rank -> exit code, for the ranks torchrun reported failed
    launcher_error: str | None = None


def run_job(launch: Launch) -> JobResult:
    """Run the job through torchrun in this process; never raises for a failed job.

    With a machine-readable --output-format, the ranks' stdout goes to our stderr for the length
    of the job (workers inherit file descriptor 1), so stdout carries only the report."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import run

    os.environ[CONFIG_ENV] = launch.options.to_env()
    _ensure_importable_in_workers()
    saved_stdout = None
    if launch.options.output_format != "full":
        sys.stdout.flush()
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
    try:
        run(launch.torchrun_args)
    except ChildFailedError as exc:
        return JobResult(False, {int(r): int(f.exitcode) for r, f in exc.failures.items()})
    except (ValueError, AssertionError, RuntimeError) as exc:
        # torchrun's own configuration and rendezvous errors: say them in one line.
        return JobResult(False, {}, f"{type(exc).__name__}: {exc}")
    finally:
        os.environ.pop(CONFIG_ENV, None)
        if saved_stdout is not None:
            sys.stdout.flush()
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
    return JobResult(True, {})
