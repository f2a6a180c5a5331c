"""Run one rehearsed rank: a process of its own with torchrun's environment for its place in the
world, CUDA emulated with the node's GPU count, and a time limit. Torch-free (the rank imports
torch, not this process).

What comes back (`RankRun`): how it ended — `finished` (the script ended by itself), `stopped`
(ddpcheck's bound was reached), `crashed` (with the user's file:line), `blocked` (past the time
limit: where it waited, from Python's faulthandler) — with its wall time and peak memory (the
process's maximum resident set, from `wait4`), and the `rehearsal`, `crash` and collective-ledger
parts of its rank record.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ddpcheck.run.run_options import (
    CONFIG_ENV,
    ENV_EMULATE,
    ENV_EMULATED_DEVICES,
    ENV_LAUNCHER_PID,
    ENV_REHEARSE,
    RunOptions,
)
from ddpcheck.run.diagnose import SECTION as LEDGER_SECTION
from ddpcheck.run.records import record_path
from ddpcheck.run.rehearse.plan import Placement

BOOTSTRAP = "ddpcheck.run.rank.bootstrap"
LIMITS = {"steps_per_pass": 2, "max_batches": 8, "passes": 2, "max_steps": 8, "time_limit": 60.0}
GRACE_S = 30.0
MAX_VIEW_ENTRIES = 5000  # past the rank's own time limit, the launcher kills it
_TORCHRUN_ONLY = ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCH_FR_DUMP_TEMP_FILE")
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


@dataclass
class RankRun:
    rank: int
    world_size: int
    node: int
    local_rank: int
    status: str = "crashed"  # finished | stopped | crashed | blocked
    exit_code: int | None = None
    seconds: float = 0.0
    peak_mb: float | None = None
    stopped: str | None = None
    crash: dict[str, Any] | None = None
    blocked_at: str | None = None
    rehearsal: dict[str, Any] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)
    output_tail: str = ""

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k not in ("ledger", "output_tail")}
        world = (self.ledger.get("groups") or {}).get("world") or {}
        data["collectives"] = {"count": world.get("entered", 0), "hash": world.get("hash", 0),
                               "recent": world.get("recent", [])}
        return data


class Stopped(Exception):
    """The rehearsal was stopped (Ctrl-C, an error) before this rank started."""


class LiveRanks:
    """The rank processes running now, so that a rehearsal that stops (Ctrl-C while several ranks
    run beside each other on worker threads) kills every one of them, and starts no more."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._stopped = False

    def start(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._stopped:
                raise Stopped()
            proc = subprocess.Popen(cmd, **kwargs)
            self._procs.add(proc)
            return proc

    def ended(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                _kill(proc)


def run_rank(target: Any, options: RunOptions, placement: Placement, gpus_per_node: int, record_dir: str,
             limits: dict[str, Any] | None = None, live: LiveRanks | None = None) -> RankRun:
    limits = {**LIMITS, **(limits or {})}
    os.makedirs(record_dir, exist_ok=True)
    env = dict(os.environ)
    for key in _TORCHRUN_ONLY:
        env.pop(key, None)
    env.update(placement.environment())
    rank_options = replace(options, record_dir=record_dir, hang_timeout=0.0, collective_timeout=0.0,
                           check_first=0, check_every=0, codes=(), report=None, html=None, rehearse=(),
                           scaling=(), quiet=True)
    env[CONFIG_ENV] = rank_options.to_env()
    env[ENV_EMULATE] = "1"
    env[ENV_EMULATED_DEVICES] = str(gpus_per_node)
    env[ENV_LAUNCHER_PID] = str(os.getpid())
    env[ENV_REHEARSE] = json.dumps(limits)
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun gives each of several workers
    log_path = os.path.join(record_dir, f"output-{placement.rank}.log")
    cmd = [sys.executable, "-u", "-m", BOOTSTRAP, *target.bootstrap_args()]
    result = RankRun(placement.rank, placement.world_size, placement.node, placement.local_rank)
    started = time.monotonic()
    cwd = _fresh_view(os.getcwd(), os.path.join(record_dir, f"cwd-{placement.rank}"))
    env["PWD"] = cwd
    with open(log_path, "wb") as log:
        live = live or LiveRanks()
        proc = live.start(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        killer = threading.Timer(float(limits["time_limit"]) + GRACE_S, _kill, (proc,))
        killer.daemon = True
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except KeyboardInterrupt:
            _kill(proc)
            raise
        finally:
            killer.cancel()
            live.ended(proc)
        proc.returncode = os.waitstatus_to_exitcode(status)
    result.seconds = time.monotonic() - started
    result.peak_mb = usage.ru_maxrss / 1024.0  # kilobytes on Linux
    result.exit_code = proc.returncode
    result.output_tail = _tail(log_path)
    _read_record(result, record_dir)
    _read_stack(result, record_dir)
    return result


def _fresh_view(cwd: str, view: str) -> str:
    """A folder that shows the working directory's entries (as links) and takes what the rank
    creates at its top level: each rehearsed rank starts from the same files, as every rank of the
    real job does at launch, instead of resuming from a checkpoint a previous rehearsed rank wrote
    (and nothing it writes there stays in the project). The working directory itself when it is
    too large to mirror."""
    try:
        entries = os.listdir(cwd)
        if len(entries) > MAX_VIEW_ENTRIES:
            return cwd
        os.makedirs(view, exist_ok=True)
        for name in entries:
            os.symlink(os.path.join(cwd, name), os.path.join(view, name))
    except OSError:
        return cwd
    return view


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.kill()
    except OSError:
        pass


def _tail(path: str, size: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - size, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_record(result: RankRun, record_dir: str) -> None:
    try:
        with open(record_path(record_dir, result.rank)) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        record = {}
    probes = record.get("probes") or {}
    result.rehearsal = probes.get("rehearsal") or {}
    result.ledger = probes.get(LEDGER_SECTION) or {}
    result.crash = probes.get("crash") or None
    result.stopped = result.rehearsal.get("stopped")
    if result.crash:
        result.status = "crashed"
    elif result.stopped:
        result.status = "stopped"
    elif record.get("status") == "finished" and result.exit_code == 0:
        result.status = "finished"
    elif record.get("status") == "finished":
        result.status = "crashed" if record.get("error") else "finished"  # sys.exit(n): the script's choice


def _read_stack(result: RankRun, record_dir: str) -> None:
    """A rank past its time limit: faulthandler wrote every thread's stack, innermost first."""
    path = os.path.join(record_dir, f"stack-{result.rank}.txt")
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        text = ""
    if not text.strip() and not (result.exit_code is not None and result.exit_code < 0 and not result.crash
                                 and result.status not in ("stopped", "finished")):
        return
    result.status = "blocked"
    main = text.split("Current thread", 1)[-1] if "Current thread" in text else text
    for line in main.splitlines():
        m = _FRAME.match(line)
        if m and _is_user_path(m["path"]):
            result.blocked_at = f"{m['path']}:{m['line']}"
            break


def _is_user_path(path: str) -> bool:
    """Not the standard library, an installed package or ddpcheck: the user's own file."""
    import sysconfig

    import ddpcheck

    ours = [os.path.dirname(os.path.abspath(ddpcheck.__file__))]
    ours += [p for p in (sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p]
    full = os.path.abspath(path)
    return not path.startswith("<") and not any(full.startswith(os.path.abspath(p) + os.sep) for p in ours)
