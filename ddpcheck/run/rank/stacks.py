"""What a rank's training thread is doing right now, seen from another thread of the same rank (the
hang watchdog): its Python stack, and whether it is computing or blocked.

`sys._current_frames()` returns the training thread's frames while that thread sits inside gloo's
C++ (every wait there releases the GIL), so the innermost torch frame says which collective it is
in even when ddpcheck recorded none — DDP's bucket rebuild, its start-up broadcasts, a
ZeroRedundancyOptimizer's parameter broadcast, SyncBatchNorm — and the innermost frames of the
user's code say where. Computing versus blocked is the thread's own CPU clock
(`pthread_getcpuclockid`) and its scheduler state in /proc: a thread blocked in a collective uses
no CPU and sleeps; a computing one runs (or waits for a core on a loaded machine: still 'R');
a rank that downloads or writes a checkpoint moves bytes (/proc/self/io).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

Frame = tuple[str, int, str]  # file, line, function

WAITING_FOR_DATA = "waiting for a DataLoader batch"
COMPILING = "compiling (torch.compile)"
_TORCH_PLACES: tuple[tuple[str, frozenset[str] | None, str], ...] = (
    # (path inside torch, functions (None: any), what the thread is doing there), innermost wins.
    # torch.compile's first call compiles inside whatever called the module (often DDP's forward)
    # and waits for its compile workers there: those frames exist only while it compiles.
    ("_dynamo/convert_frame.py", None, COMPILING),
    ("_inductor/async_compile.py", None, COMPILING),
    ("_inductor/compile_fx.py", None, COMPILING),
    ("_inductor/codecache.py", None, COMPILING),
    ("nn/parallel/distributed.py", frozenset({"_sync_buffers", "_sync_module_buffers",
                                              "_default_broadcast_coalesced", "_distributed_broadcast_coalesced"}),
     "DDP's buffer broadcast in the forward"),
    ("nn/parallel/distributed.py", frozenset({"_sync_module_states", "_verify_param_shape_across_processes",
                                              "__init__"}), "DDP's start-up broadcast of parameters and buffers"),
    ("nn/parallel/distributed.py", frozenset({"_pre_forward", "_post_forward", "forward"}),
     "DDP's forward (bucket rebuild or join)"),
    ("distributed/algorithms/join.py", None, "DDP's Join context (uneven inputs)"),
    ("distributed/optim/zero_redundancy_optimizer.py", None, "ZeroRedundancyOptimizer.step's parameter broadcast"),
    ("nn/modules/_functions.py", None, "SyncBatchNorm's all-gather in the forward"),
    ("autograd/graph.py", frozenset({"_engine_run_backward"}), "the backward"),
    ("utils/data/dataloader.py", frozenset({"_next_data", "_get_data", "_try_get_data", "__next__"}),
     WAITING_FOR_DATA),
)
_C10D = "distributed/distributed_c10d.py"


def thread_frames(ident: int) -> list[Frame]:
    """The thread's Python frames, outermost first ([] when it has none now)."""
    frame = sys._current_frames().get(ident)
    out: list[Frame] = []
    while frame is not None:
        # f_lineno is None while a frame is between instructions (3.11): 0 stands for unknown.
        out.append((frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    return out[::-1]


def place(frames: list[Frame]) -> str | None:
    """The innermost known place in torch the thread is in, e.g. "DDP's buffer broadcast in the forward"."""
    for path, _, function in reversed(frames):
        norm = path.replace(os.sep, "/")
        if "/torch/" not in norm:
            continue
        if norm.endswith(_C10D) and not function.startswith("_"):
            return f"torch.distributed.{function}"
        for suffix, functions, text in _TORCH_PLACES:
            if norm.endswith(suffix) and (functions is None or function in functions):
                return text
    return None


def user_frames(frames: list[Frame], is_user_file: Callable[[str], bool], n: int = 3) -> list[str]:
    """The innermost `n` frames of the user's code, innermost first: 'train.py:23 in main'."""
    out = []
    for path, line, function in reversed(frames):
        if is_user_file(path):
            out.append(f"{path}:{line} in {function}")
            if len(out) == n:
                break
    return out


def format_stack(frames: list[Frame], limit: int = 40) -> str:
    """The stack as Python prints a traceback (most recent call last)."""
    import linecache

    lines = []
    for path, line, function in frames[-limit:]:
        lines.append(f'  File "{path}", line {line}, in {function}')
        code = linecache.getline(path, line).strip() if line > 0 else ""
        if code:
            lines.append(f"    {code}")
    return "\n".join(lines)


@dataclass
class Load:
    cpu_ratio: float  # CPU seconds per wall second of the thread since the previous reading
    running: float  # fraction of the samples in which the thread was running, runnable or in disk I/O
    children_ratio: float  # the same for this process's descendants (DataLoader workers, compile workers)
    others_ratio: float = 0.0  # the rank's other threads (gloo's transfers, intra-op pools)
    io_rate: float = 0.0  # bytes per second the process read or wrote (a download, a checkpoint)

    @property
    def busy(self) -> bool:
        return (self.cpu_ratio > BUSY_CPU_RATIO or self.running >= 0.5
                or self.others_ratio > BUSY_CPU_RATIO or self.io_rate > BUSY_IO_RATE)

    def to_json(self) -> dict[str, float]:
        return {"cpu": round(self.cpu_ratio, 3), "running": round(self.running, 2),
                "other_threads_cpu": round(self.others_ratio, 3), "children_cpu": round(self.children_ratio, 3),
                "io_bytes_per_s": round(self.io_rate)}


BUSY_CPU_RATIO = 0.05  # blocked in gloo: ~0; computing on a core shared by eight processes: ~0.1+
# A download or a checkpoint moves far more; the watchdog's own /proc reads, a few KiB per poll.
BUSY_IO_RATE = 64 * 1024
MAX_DESCENDANTS = 256


class ThreadMeter:
    """CPU use and scheduler state of one thread, sampled from another thread of the process."""

    def __init__(self, thread: threading.Thread) -> None:
        self.ident = thread.ident or 0
        self.tid = thread.native_id or 0
        try:
            self.clock: int | None = time.pthread_getcpuclockid(self.ident)
        except (AttributeError, OSError, OverflowError):
            self.clock = None
        self.samples = 0
        self.running_samples = 0
        self.cpu, self.children, self.wall = self._cpu(), self._children_cpu(), time.monotonic()
        self.process, self.reader = time.process_time(), 0.0
        self.io = self._io()

    def _cpu(self) -> float:
        if self.clock is not None:
            try:
                return time.clock_gettime(self.clock)
            except OSError:
                pass
        return time.process_time()

    def _stat(self, path: str) -> list[str] | None:
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            return None
        return text[text.rfind(")") + 2:].split()  # after "pid (comm) "

    def sample(self) -> None:
        """One look at the thread's state (R running/runnable, S sleeping, D disk I/O, ...)."""
        fields = self._stat(f"/proc/self/task/{self.tid}/stat")
        if fields:
            self.samples += 1
            self.running_samples += fields[0] in ("R", "D")  # running, or in disk I/O (a checkpoint)

    @staticmethod
    def _io_of(path: str) -> int:
        try:
            with open(path) as fh:
                fields = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
            return int(fields.get("rchar", 0)) + int(fields.get("wchar", 0))
        except (OSError, ValueError):
            return 0

    def _io(self) -> int:
        """Bytes this process has read and written through system calls (sockets and files), less
        those of the calling thread (the watchdog's own store traffic and /proc reads)."""
        return self._io_of("/proc/self/io") - self._io_of(f"/proc/self/task/{threading.get_native_id()}/io")

    def _children_cpu(self) -> float:
        """CPU seconds of every live descendant: DataLoader workers are children, but torch.compile's
        code generation runs in a compile-worker process's own pool, two levels down."""
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total = 0
        seen: set[str] = set()
        parents = ["self"]
        while parents and len(seen) < MAX_DESCENDANTS:
            found: list[str] = []
            for parent in parents:
                try:
                    tasks = os.listdir(f"/proc/{parent}/task")
                except OSError:
                    continue
                for task in tasks:
                    try:
                        with open(f"/proc/{parent}/task/{task}/children") as fh:
                            found.extend(pid for pid in fh.read().split() if pid not in seen)
                    except OSError:
                        continue
            parents = []
            for pid in found:
                if pid in seen:
                    continue
                seen.add(pid)
                parents.append(pid)
                fields = self._stat(f"/proc/{pid}/stat")
                if fields and len(fields) > 12:
                    total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks

    def read(self) -> Load:
        """The load since the previous read (call it from one thread: its own CPU is left out);
        starts a new window."""
        cpu, children, wall = self._cpu(), self._children_cpu(), time.monotonic()
        process, reader, io = time.process_time(), time.thread_time(), self._io()
        span = max(wall - self.wall, 1e-3)
        others = (process - self.process) - (cpu - self.cpu) - (reader - self.reader)
        load = Load((cpu - self.cpu) / span, self.running_samples / self.samples if self.samples else 0.0,
                    max(children - self.children, 0.0) / span, max(others, 0.0) / span,
                    max(io - self.io, 0) / span)
        self.cpu, self.children, self.wall = cpu, children, wall
        self.process, self.reader, self.io = process, reader, io
        self.samples = self.running_samples = 0
        return load
