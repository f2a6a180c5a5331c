"""Run the job: through PyTorch's own launcher, `torch.distributed.run` (torchrun), called in this
process exactly as Lightning's and Accelerate's launchers do — never a hand-written process pool —
or, for a script that starts its own workers, with the plain interpreter and ddpcheck's start-up
hook on PYTHONPATH. Ctrl-C stops every rank and is remembered, never raised.
"""

from __future__ import annotations

import os
import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpcheck.run.launcher import launcher_log
from ddpcheck.run.launcher.command_line import BOOTSTRAP, Launch
from ddpcheck.run.launcher.plan import Plan, restore_environment
from ddpcheck.run.run_options import CONFIG_ENV

ENV_STARTUP = "DDPCHECK_STARTUP"  # "1": the start-up hook instruments this process tree
ENV_MODE = "DDPCHECK_MODE"  # "spawn" in a plain-interpreter run
STARTUP_DIR = Path(__file__).resolve().parent.parent / "rank" / "startup"  # its sitecustomize


@dataclass(frozen=True)
class JobResult:
    ok: bool
    exit_codes: dict[int, int]  # global rank -> exit code, for the ranks torchrun reported failed
    launcher_error: str | None = None


def run(launch: Launch, plan: Plan) -> JobResult:
    """Run the job as planned; `plan.interrupted` says whether Ctrl-C (or SIGTERM) stopped it."""
    try:
        if plan.spawn_site is None:
            return run_job(launch)
        env = dict(os.environ)
        env[CONFIG_ENV] = launch.options.to_env()
        code, plan.interrupted = run_plain(launch.target.name, list(launch.target.args), env)
        return JobResult(code == 0, {} if code == 0 else {0: code})
    except KeyboardInterrupt:
        plan.interrupted = True
    except Exception as exc:  # torchrun's SignalException (SIGINT/SIGTERM to this process)
        if type(exc).__name__ != "SignalException":
            raise
        plan.interrupted = True
    finally:
        restore_environment(plan)
    return JobResult(False, {})


def _ensure_importable_in_workers() -> None:
    """Workers run `python -m ddpcheck.run.rank.bootstrap`: make sure they find this very ddpcheck."""
    import ddpcheck

    root = os.path.dirname(os.path.dirname(os.path.abspath(ddpcheck.__file__)))
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root in (os.path.abspath(p) for p in entries) or root in sys.path[1:] and "site-packages" in root:
        return
    os.environ["PYTHONPATH"] = os.pathsep.join([*entries, root])


def run_job(launch: Launch) -> JobResult:
    """Run the job through torchrun in this process; never raises for a failed job.

    With a machine-readable --output-format, the ranks' stdout goes to our stderr for the length
    of the job (workers inherit file descriptor 1), so stdout carries only the report."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed import run as torch_distributed_run

    torchrun: Any = torch_distributed_run.run

    os.environ[CONFIG_ENV] = launch.options.to_env()
    _ensure_importable_in_workers()
    saved_stdout = None
    if launch.options.output_format != "full":
        sys.stdout.flush()
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
    agents: list[NodeAgent] = []
    result = JobResult(True, {})
    try:
        agents = [NodeAgent.start(launch, node) for node in range(1, launch.nodes)]
        for agent in agents:
            agent.watch()
        with launcher_log.captured(launch.options.record_dir, verbose=launch.options.verbose):
            torchrun(launch.torchrun_args)
    except ChildFailedError as exc:
        result = JobResult(False, {int(r): int(f.exitcode) for r, f in exc.failures.items()})
    except (ValueError, AssertionError, RuntimeError) as exc:
        # torchrun's own configuration and rendezvous errors: say them in one line.
        result = JobResult(False, {}, f"{type(exc).__name__}: {exc}")
    except BaseException:  # Ctrl-C, SIGTERM: the other nodes stop at once too
        for agent in agents:
            agent.stop()
        agents = []
        raise
    finally:
        os.environ.pop(CONFIG_ENV, None)
        if saved_stdout is not None:
            sys.stdout.flush()
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
        for agent in agents:  # the other nodes: their failed ranks join this node's
            result = agent.finish(result, wait_s=60.0 if result.ok else 10.0)
    return result


def _stop_own_workers() -> None:
    """Another node's agent failed: its ranks are gone and this node's ranks would wait for them in
    their next collective (or in init_process_group) until gloo's 30 minutes run out. Stopping
    them as torchrun stops the survivors of a crash (SIGTERM) ends this node's agent too."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                ppid = fh.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                command = fh.read()
        except (OSError, IndexError):
            continue
        if ppid == me and BOOTSTRAP.encode() in command:
            try:
                os.kill(int(entry), signal.SIGTERM)
            except OSError:
                pass


@dataclass
class NodeAgent:
    """The torchrun agent of one more emulated node (`--nodes`), a process of its own."""

    proc: subprocess.Popen[bytes]
    out_file: str

    @classmethod
    def start(cls, launch: Launch, node: int) -> "NodeAgent":
        import pickle

        folder = launch.options.record_dir or tempfile.mkdtemp(prefix="ddpcheck-node-")
        args_file = os.path.join(folder, f"node-agent-{node}.args")
        with open(args_file, "wb") as fh:
            pickle.dump(launch.torchrun_args, fh)
        out_file = os.path.join(folder, f"node-agent-{node}.json")
        proc = subprocess.Popen([sys.executable, "-m", "ddpcheck.run.launcher.node_agent", args_file, out_file],
                                start_new_session=True)
        return cls(proc, out_file)

    def watch(self) -> None:
        """When this agent fails, stop this node's ranks too, as a real cluster's job would end."""
        import threading

        def wait() -> None:
            if self.proc.wait() != 0:
                time.sleep(2.0)  # the failed node's ranks write their records first
                _stop_own_workers()

        threading.Thread(target=wait, name=f"ddpcheck-node-agent-{self.proc.pid}", daemon=True).start()

    def finish(self, result: JobResult, wait_s: float = 60.0) -> JobResult:
        """Wait for the agent (its job is over or failed on this node), stop it if it lingers, and
        add its failed ranks to `result`."""
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        except KeyboardInterrupt:
            self.stop()
            raise
        _reap(self.proc.pid)
        try:
            with open(self.out_file, encoding="utf-8") as fh:
                said = json.load(fh)
        except (OSError, ValueError):
            said = {"failed": {}, "error": None}
        failed = {int(rank): int(code) for rank, code in (said.get("failed") or {}).items()}
        if not failed and not said.get("error") and self.proc.returncode == 0:
            return result
        codes = {**failed, **result.exit_codes}
        return JobResult(False, codes, result.launcher_error or said.get("error"))

    def stop(self) -> None:
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
        _reap(self.proc.pid)


def plain_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment of a plain-interpreter run: start-up hook on, ddpcheck importable."""
    import ddpcheck

    root = str(Path(ddpcheck.__file__).resolve().parent.parent)
    paths = [str(STARTUP_DIR), root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    out[ENV_STARTUP] = "1"
    out[ENV_MODE] = "spawn"
    return out


def run_plain(script: str, args: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run `python script args...` (a spawn-style script) to the end; Ctrl-C stops the whole tree.
    Returns (exit code, interrupted)."""
    proc = subprocess.Popen([sys.executable, script, *args], env=plain_environment(env), start_new_session=True)
    interrupted = False
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        interrupted = True
        _signal_group(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            code = proc.wait()
    finally:
        _reap(proc.pid)
    return code, interrupted


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pgid: int) -> None:
    """No worker outlives the run: whatever is left of the script's process group goes."""
    _signal_group(pgid, signal.SIGTERM)
    time.sleep(0.2)
    _signal_group(pgid, signal.SIGKILL)
