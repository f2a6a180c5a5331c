"""How a rank died: which rank raised what, where in the user's code; or which rank a signal killed.

In each rank, `describe(exc)` captures the exception — type, message, the innermost frame of the
user's code — into the rank's record before the rank exits. After the job the judge reads them
back and names the first real failure: a rank whose collective broke only because a peer died
("Connection reset by peer") is a consequence, not the cause. Ranks that died without a Python
exception (a signal, e.g. the out-of-memory killer) are reported from their exit codes.
torchrun's own summary (`error_file: <N/A>`) is never shown.
"""

from __future__ import annotations

import os
import re
import signal
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run.records import Record, section
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

NAME = "crash"  # the part of the rank record that holds it

# A peer that went away shows up in the survivors as one of these, from gloo or the store.
_CONSEQUENCE = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|Socket closed|ProcessGroupGloo.*(closed|aborted)"
    r"|failed to recv|failed to send|Connection refused|Read error|Write error",
    re.IGNORECASE,
)


class RankCrashed(Incident):
    """A rank raised an exception: the report names the rank, the exception and the line of your script.

    When one rank of a DDP job raises, torchrun only says that a child failed (`error_file: <N/A>`)
    and the other ranks break a moment later inside their next collective ("Connection reset by
    peer"), so the real error is easy to miss among the collateral failures. ddpcheck records the
    exception in every rank, reports the first rank that failed on its own — its exception type,
    message and the innermost frame of your code — and lists the ranks that failed only because of
    it. The other ranks are stopped at once; the report of what was checked until then is kept.

    ## Why it matters

    Without it you read four tracebacks, three of them about sockets, and guess which came first.

    ## How to fix

    Fix the exception at the reported line; the full traceback is in the JSON report
    (`details.traceback`).

    ## References

    - https://pytorch.org/docs/stable/elastic/errors.html
    """

    code = "DDP120"
    name = "rank-crashed"
    severity = Severity.ERROR
    hint = "fix the exception at the reported line; the full traceback is in the JSON report"
    BAD = """
    for step, (x, y) in enumerate(loader):
        if dist.get_rank() == 1 and step == 3:
            raise ValueError("bad batch")  # reported: rank 1 raised ValueError at train.py:NN
    """


class RankKilled(Incident):
    """A rank died from a signal without a Python exception (a segfault, an abort, the OOM killer).

    The rank left no traceback: it was ended by a signal that neither torchrun nor ddpcheck sent.
    `SIGKILL` usually means the kernel's out-of-memory killer; `SIGSEGV` or `SIGABRT` a crash in
    native code (a C++ extension, a CUDA kernel, a library built for another torch).

    ## Why it matters

    The other ranks then fail in their next collective, and their errors hide the real one.

    ## How to fix

    For SIGKILL, check memory (`dmesg`, fewer DataLoader workers, a smaller batch). For SIGSEGV or
    SIGABRT, run the rank alone with `python -X faulthandler` to see the native stack.
    """

    code = "DDP127"
    name = "rank-killed"
    severity = Severity.ERROR
    hint = "SIGKILL: check memory; SIGSEGV/SIGABRT: run with `python -X faulthandler` for the stack"


class CudaNotEmulated(Incident):
    """The GPU script called a CUDA feature that `ddpcheck run --cpu` cannot emulate on a CPU.

    On a machine without CUDA, ddpcheck runs GPU scripts on the CPU: `nccl` becomes `gloo`, CUDA
    devices become the CPU, `set_device` and `synchronize` do nothing, DDP's `device_ids` are
    dropped. Some features have no honest CPU stand-in and stop the run at the call, naming it and
    your line: CUDA events and streams (`torch.cuda.Event`, `Stream`, `current_stream`),
    `Tensor.pin_memory()`, `torch.load(map_location="cuda...")`, `torch.set_default_device("cuda")`,
    autocast on `"cuda"` (on the CPU it would silently compute in float32), an enabled CUDA
    `GradScaler`, and device queries (`get_device_name`, `get_device_properties`, the memory
    statistics). `x.is_cuda` stays False under the emulation.

    ## Why it matters

    Emulating these would make the dry run lie: timings, precision or memory would not be those of
    the GPU job.

    ## How to fix

    Skip the call when the environment variable `DDPCHECK_EMULATE_CUDA` is `1` (ddpcheck sets it
    in every rank it emulates), load checkpoints with `map_location="cpu"`, or run on a GPU machine.
    """

    code = "DDP121"
    name = "cuda-not-emulated"
    severity = Severity.ERROR
    hint = 'skip the call when DDPCHECK_EMULATE_CUDA=1, or use map_location="cpu"; or run on a GPU'
    BAD = """
    start = torch.cuda.Event(enable_timing=True)  # stops `ddpcheck run --cpu` here
    """
    GOOD = """
    timing = not os.environ.get("DDPCHECK_EMULATE_CUDA")
    start = torch.cuda.Event(enable_timing=True) if timing else None
    """


class SpawnUnderLauncher(Incident):
    """A rank started by the launcher called `mp.spawn`: each rank would start a job of its own.

    ddpcheck runs scripts that spawn their own workers with the plain interpreter when it sees the
    call before the launch. When the call is hidden (built dynamically, in another module), a guard
    in every rank stops it instead: under torchrun, N ranks that each spawn N workers form N jobs
    on one port that wait for each other forever.

    ## Why it matters

    Without the guard the run hangs silently.

    ## How to fix

    Run the script without `--nproc` and tell ddpcheck it spawns its own workers with
    `--spawn`, or make it read `LOCAL_RANK`/`WORLD_SIZE` from the environment instead of spawning.
    """

    code = "DDP126"
    name = "spawn-under-launcher"
    severity = Severity.ERROR
    hint = "rerun with `--spawn` (and no --nproc), or read LOCAL_RANK/WORLD_SIZE instead of spawning"


@dataclass(frozen=True)
class Crash:
    rank: int
    type: str
    message: str
    path: str | None
    line: int | None
    function: str | None
    traceback: str
    time: float
    consequence: bool  # broke because another rank died

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path else "<no frame of the script>"


def describe(exc: BaseException, rank: int) -> dict[str, Any] | None:
    """What this rank died of, JSON-ready; None for an exit or an interrupt. Never raises."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return None
    try:
        from ddpcheck.run.rank.sites import innermost_user_frame

        frame = innermost_user_frame(exc.__traceback__)
        message = str(exc).strip()
        return Crash(
            rank=rank,
            type=type(exc).__name__,
            message=message.splitlines()[0][:500] if message else "",
            path=frame[0] if frame else None,
            line=frame[1] if frame else None,
            function=frame[2] if frame else None,
            traceback="".join(traceback.format_exception(exc))[-6000:],
            time=time.time(),
            consequence=bool(_CONSEQUENCE.search(message)),
        ).__dict__
    except Exception:  # noqa: BLE001 - reporting must not mask the user's exception
        return None


def read(records: list[Record]) -> list[Crash]:
    """The crashes the ranks recorded, root cause first."""
    crashes = []
    for record in records:
        data = section(record, NAME)
        if data:
            try:
                crashes.append(Crash(**data))
            except TypeError:
                continue
    return sorted(crashes, key=lambda c: (c.consequence, c.time))


def root_cause(crashes: list[Crash]) -> Crash | None:
    """The first rank that failed on its own; the others are collateral."""
    return crashes[0] if crashes else None


def signal_name(exitcode: int) -> str | None:
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def capture(session: Session) -> None:
    def say_why(exit_code: int, error: BaseException | None) -> None:
        if error is not None:
            described = describe(error, session.rank)
            if described:
                session.section(NAME).update(described)

    session.before_finish.append(say_why)


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    """One finding for the root cause, naming the collateral ranks; one per rank killed by a
    signal that nobody (not torchrun, not ddpcheck) sent."""
    crashes = read(records)
    out = []
    cause = root_cause(crashes)
    if cause is not None:
        others = sorted({c.rank for c in crashes if c.rank != cause.rank})
        check = {
            "CudaNotEmulated": CudaNotEmulated,
            "SpawnUnderLauncherError": SpawnUnderLauncher,
        }.get(cause.type, RankCrashed)
        also = f"; rank(s) {', '.join(map(str, others))} failed after it" if others else ""
        where = f" at {os.path.basename(cause.path)}:{cause.line} (in {cause.function})" if cause.path else ""
        message = f"rank {cause.rank} raised {cause.type}: {cause.message}{where}{also}"
        if check is not RankCrashed:
            message = f"rank {cause.rank}: {cause.message}"
        out.append(Verdict(
            check.code, FAIL, message, message=message, ranks=(cause.rank,), path=cause.path, line=cause.line,
            details={
                "exception": cause.type,
                "traceback": cause.traceback,
                "collateral_ranks": others,
                "all": [{"rank": c.rank, "type": c.type, "message": c.message, "where": c.where} for c in crashes],
            },
        ))
    recorded = {c.rank for c in crashes}
    for rank, code in sorted(ctx.exit_codes.items()):
        name = signal_name(code)
        # SIGTERM/SIGKILL are how torchrun stops the survivors once one rank failed.
        if rank in recorded or name is None or (cause is not None and name in ("SIGTERM", "SIGKILL")):
            continue
        if name in ("SIGTERM", "SIGINT"):
            continue
        message = (f"rank {rank} was killed by {name} without a Python exception"
                   + (" (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""))
        out.append(Verdict(RankKilled.code, FAIL, message, message=message, ranks=(rank,),
                           details={"exitcode": code, "signal": name}))
    return out


PROBE = Probe(NAME, (RankCrashed, CudaNotEmulated, SpawnUnderLauncher, RankKilled), judge, capture,
              order=2, always=True)
