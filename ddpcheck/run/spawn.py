"""Scripts that start their own worker processes (`torch.multiprocessing.spawn`).

Before the launch, `find_spawn(script)` reads the script (with `ast`, without running it) for a
call of `spawn` / `start_processes` from `torch.multiprocessing`. Such a script is run with the
plain interpreter (`launch_plain`), and its workers are instrumented by the environment-gated
start-up hook in `ddpcheck/run/startup/` (a `sitecustomize` on PYTHONPATH): torch's spawn starts
fresh interpreters, which a `-m` bootstrap would not reach.

At run time two guards complete it: in ranks started by torchrun, `install_guard()` turns a
hidden `mp.spawn` call into a clear error (DDP126) instead of N jobs that wait for each other;
in the plain parent process, `install_worker_wrapper()` wraps the worker function so that a worker
that raises is recorded like any crashing rank.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ddpcheck.run import sites

ENV_STARTUP = "DDPCHECK_STARTUP"  # "1": the start-up hook instruments this process tree
ENV_MODE = "DDPCHECK_MODE"  # "spawn" in a plain-interpreter run
_SPAWNERS = {"spawn", "start_processes"}
_MODULE = "torch.multiprocessing"


@dataclass(frozen=True)
class SpawnSite:
    path: str
    line: int
    call: str  # as written, e.g. "mp.spawn"


def find_spawn(script: str | os.PathLike) -> SpawnSite | None:
    """The first `torch.multiprocessing.spawn`/`start_processes` call in the script, if any."""
    try:
        source = Path(script).read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    modules: set[str] = set()  # local names bound to torch.multiprocessing
    functions: set[str] = set()  # local names bound to its spawn/start_processes
    torch_names: set[str] = set()  # local names bound to torch itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == _MODULE or alias.name.startswith(_MODULE + "."):
                    if alias.asname:
                        modules.add(alias.asname)
                    else:
                        torch_names.add("torch")
                elif alias.name == "torch":
                    torch_names.add(alias.asname or "torch")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.module == "torch" and alias.name == "multiprocessing":
                    modules.add(alias.asname or alias.name)
                elif node.module.startswith(_MODULE) and alias.name in _SPAWNERS:
                    functions.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        text = ast.unparse(node.func)
        func = node.func
        hit = (isinstance(func, ast.Name) and func.id in functions) or (
            isinstance(func, ast.Attribute)
            and func.attr in _SPAWNERS
            and (
                (isinstance(func.value, ast.Name) and func.value.id in modules)
                or any(text.startswith(f"{t}.multiprocessing.") for t in torch_names)
            )
        )
        if hit:
            return SpawnSite(str(script), node.lineno, text)
    return None


class SpawnUnderLauncherError(RuntimeError):
    """mp.spawn called inside a rank that torchrun started."""


def install_guard() -> None:
    """In a rank started by the launcher: refuse mp.spawn with a clear message, not a hang."""
    import torch.multiprocessing as mp

    def refuse(*args, **kwargs):
        where = sites.call_site()
        world = os.environ.get("WORLD_SIZE", "?")
        raise SpawnUnderLauncherError(
            f"the script calls torch.multiprocessing.spawn{' at ' + where if where else ''} inside a rank "
            f"that the launcher started ({world} ranks would each start their own job and wait forever). "
            "Rerun with `ddpcheck run --spawn script.py` (no --nproc), or read LOCAL_RANK/WORLD_SIZE instead."
        )

    for name in _SPAWNERS:
        if hasattr(mp, name):
            setattr(mp, name, refuse)


class Worker:
    """The user's worker function, wrapped so that each worker ends like a rank of ddpcheck's own:
    its record written (with the exception it died of), and an exit that cannot abort at
    interpreter teardown. Picklable: torch's spawn sends it to fresh interpreters."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, index: int, *args):
        from ddpcheck.run import spawn_startup

        session = spawn_startup.SESSION
        if session is not None and "RANK" not in os.environ:
            # Until init_process_group says otherwise, worker i is rank i (as mp.spawn's examples have it).
            session.rank = session.meta["rank"] = index
            if session.options.record_dir:
                session.record_path = os.path.join(session.options.record_dir, f"rank-{index}.json")
        try:
            self.fn(index, *args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            _finish(session, code, None)
            raise
        except BaseException as exc:
            _finish(session, 1, exc)
            raise  # torch's spawn sends the traceback to the parent
        _finish(session, 0, None)
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(0)


def _finish(session, code: int, error: BaseException | None) -> None:
    if session is None:
        return
    try:
        session.finish(code, error)
    except Exception as exc:  # noqa: BLE001
        print(f"ddpcheck: could not write the worker's record: {exc}", file=sys.stderr)


def install_worker_wrapper() -> None:
    """In the plain parent of a spawn-style script: wrap the worker function of every spawn."""
    import torch.multiprocessing as mp
    import torch.multiprocessing.spawn as spawn_module

    for module in (mp, spawn_module):
        for name in _SPAWNERS:
            original = getattr(module, name, None)
            if original is None or getattr(original, "__ddpcheck__", False):
                continue

            def wrapped(fn, *args, __original=original, **kwargs):
                return __original(Worker(fn), *args, **kwargs)

            wrapped.__ddpcheck__ = True
            wrapped.__wrapped__ = original
            setattr(module, name, wrapped)


def startup_path() -> str:
    """The directory holding the start-up `sitecustomize` (prepended to PYTHONPATH)."""
    return str(Path(__file__).with_name("startup"))


def plain_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment of a plain-interpreter run: start-up hook on, ddpcheck importable."""
    import ddpcheck

    root = str(Path(ddpcheck.__file__).resolve().parent.parent)
    paths = [startup_path(), root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    out[ENV_STARTUP] = "1"
    out[ENV_MODE] = "spawn"
    return out


def run_plain(script: str, args: list[str], env: dict[str, str]):
    """Run `python script args...` (a spawn-style script) to the end; Ctrl-C stops the whole tree.
    Returns (exit code, interrupted)."""
    import signal

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


def _signal_group(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pgid: int) -> None:
    """No worker outlives the run: whatever is left of the script's process group goes."""
    import signal
    import time

    _signal_group(pgid, signal.SIGTERM)
    time.sleep(0.2)
    _signal_group(pgid, signal.SIGKILL)
