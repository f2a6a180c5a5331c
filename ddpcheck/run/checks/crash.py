"""How a rank died: which rank raised what, where in the user's code; or which rank a signal killed.

In each rank, `describe(exc)` captures the exception — type, message, the innermost frame of the
user's code — into the rank's record before the rank exits; when that exception only re-raised an
earlier one's message under another type, the earlier one is captured and the re-raise noted. After the job the judge reads them
back and names the first real failure: a rank whose collective broke only because a peer died
("Connection reset by peer") is a consequence, not the cause. Ranks that died without a Python
exception (a signal, e.g. the out-of-memory killer) are reported from their exit codes.
torchrun's own summary (`error_file: <N/A>`) is never shown.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from ddpcheck.findings import Severity
from ddpcheck.run import reach
from ddpcheck.run.rank.crash_record import SECTION, Crash, describe, read
from ddpcheck.run.records import Record
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

NAME = SECTION  # the part of the rank record that holds it (rank/crash_record.py)


class RankCrashed(Incident):
    """A rank raised an exception: the report names the rank, the exception and the line of your script.

    When one rank of a DDP job raises, torchrun only says that a child failed (`error_file: <N/A>`)
    and the other ranks break a moment later inside their next collective ("Connection reset by
    peer"), so the real error is easy to miss among the collateral failures. ddpcheck records the
    exception in every rank, reports the first rank that failed on its own — its exception type,
    message and the innermost frame of your code — and lists the ranks that failed only because of
    it. The other ranks are stopped at once; the report of what was checked until then is kept.

    A handler that catches every error and raises a new one carrying the old message
    (`except Exception as e: raise ValueError(str(e))`, `raise RuntimeError(f"failed: {e}") from e`)
    would put the report at its own `raise` line. When the new exception only passes the old one on
    (it holds it, or repeats its message), the report names the original exception, its line and
    function in your code, and where it was re-raised: "raised TypeError: ... at model.py:40 (in
    build), re-raised as ValueError at train.py:102 (in worker)". A handler that writes its own
    message (`except KeyError: raise ValueError(f"unknown dataset {name}")`) is the error the user
    meant to report, and its line is named.

    `ddpcheck trace` reports a rank whose Flight Recorder dump is missing from a set under this
    code: every rank writes one when the job times out, so a rank without one had died
    ([docs/trace.md](../docs/trace.md)).

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
    INVALID = ("""
    for step, (x, y) in enumerate(loader):
        if dist.get_rank() == 1 and step == 3:
            raise ValueError("bad batch")  # reported: rank 1 raised ValueError at train.py:NN
    """,)


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

    On a machine without CUDA, ddpcheck runs GPU scripts on the CPU (DDP122 lists what is
    emulated: devices, `torch.cuda` and `torch.accelerator` queries, events and streams, AMP,
    `nccl`). A few features have no CPU stand-in at all and stop the run at the call, naming it and
    your line: CUDA graphs (`torch.cuda.CUDAGraph`, `torch.cuda.graph`,
    `make_graphed_callables`), kernels compiled for the GPU (`torch.cuda.jiterator`), and anything
    that reaches the CUDA runtime from outside torch (custom CUDA extensions, NCCL-only calls).

    ## Why it matters

    There is nothing on a CPU to replay a CUDA graph or run a CUDA kernel; pretending would make
    the dry run lie.

    ## How to fix

    Skip the call when the environment variable `DDPCHECK_EMULATE_CUDA` is `1` (ddpcheck sets it
    in every rank it emulates), or run on a GPU machine.
    """

    code = "DDP121"
    name = "cuda-not-emulated"
    severity = Severity.ERROR
    hint = "skip the call when DDPCHECK_EMULATE_CUDA=1, or run on a GPU machine"
    INVALID = ("""
    graph = torch.cuda.CUDAGraph()  # stops `ddpcheck run --cpu` here
    """,)
    VALID = ("""
    use_graphs = not os.environ.get("DDPCHECK_EMULATE_CUDA")
    graph = torch.cuda.CUDAGraph() if use_graphs else None
    """,)


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


class EndedBeforeTraining(Incident):
    """The script ended on its own before it trained (no optimizer step, no backward pass): nothing was checked.

    Some scripts stop politely before training: a device-count check (`Unable to locate
    sufficient 4 gpus ... Exiting.`), an empty dataset, `--help`, a config that says there is
    nothing to do. ddpcheck says so plainly — which rank ended first, with which exit code, at
    which line of your script, and the last line it printed — and marks every check "not
    reached" instead of blaming the script for a missing process group or DDP model it never got
    to build. A script that ran backward passes has trained, even with no DDP model and no
    `torch.optim` step (a hand-written optimizer that reduces the gradients itself, as ZeRO-style
    engines do): it is not reported here, and the checks that need a DDP model or an optimizer
    step say that the script trained without one.

    ## Why it matters

    A dry run that stopped before training checked nothing; it must not read as a pass, nor as a
    list of failures.

    ## How to fix

    Give the script what it asked for (the reason is in its last line), e.g. more processes with
    `--nproc` when it counts GPUs: under `ddpcheck run --cpu` every rank is one emulated GPU.
    """

    code = "DDP130"
    name = "ended-before-training"
    severity = Severity.INFO
    leads = True  # the report opens with it: it says why nothing below was checked
    INVALID = ("""
    if torch.cuda.device_count() < 4:
        print("Unable to locate sufficient 4 gpus to run this example. Exiting.")
        sys.exit()  # `ddpcheck run --nproc 2`: ended before training, every check not reached
    """,)


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
    from ddpcheck.run.rank import ending

    ending.capture(session)

    def say_why(exit_code: int, error: BaseException | None) -> None:
        if error is not None:
            described = describe(error, session.rank)
            if described:
                session.section(NAME).update(described)

    session.before_finish.append(say_why)


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    """The root cause first: the first rank that failed on its own (an exception that is not a
    broken connection, or a signal nobody sent), naming the ranks that failed or were stopped
    because of it; when every exception is a broken connection, the rank that left the job first
    leads. A run that ended on its own before training is said plainly (DDP130)."""
    crashes = read(records)
    ends = reach.endings(records, ctx.exit_codes)
    recorded = {c.rank for c in crashes}
    # SIGTERM (and SIGKILL after a crash) is how torchrun stops the survivors; SIGINT is Ctrl-C.
    spared = ("SIGTERM", "SIGINT", "SIGKILL") if crashes else ("SIGTERM", "SIGINT")
    killed = {rank: signal_name(code) for rank, code in sorted(ctx.exit_codes.items())
              if rank not in recorded and signal_name(code) is not None and signal_name(code) not in spared}
    own = [c for c in crashes if not c.consequence]
    out: list[Verdict] = []
    if own:
        out.append(_crashed(own[0], crashes, ends, killed))
    elif killed:
        rank, name = next(iter(killed.items()))
        oom = " (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""
        message = f"rank {rank} was killed by {name} without a Python exception{oom}" \
            + _after(rank, crashes, ends, killed)
        out.append(Verdict(RankKilled.code, FAIL, message, message=message, ranks=(rank,),
                           details={"exitcode": ctx.exit_codes[rank], "signal": name}))
    elif crashes:
        out.append(_crashed(crashes[0], crashes, ends, killed))
    if not crashes and not killed:
        early = reach.early_exit(ends, ctx.world_size)
        if early is not None:
            said = f"; its last output: {early['last_output']!r}" if early["last_output"] else ""
            message = f"{early['why']}{said}. Nothing was trained, so no check was reached."
            out.append(Verdict(EndedBeforeTraining.code, FAIL, message, message=message,
                               ranks=(early["rank"],), hint=False, details=early))
    # A signal that nobody sent, on a rank that is not the root cause: its own finding.
    for rank, name in killed.items():
        if out and rank in out[0].ranks:
            continue
        if own or crashes:
            continue  # died after the root cause: a consequence, listed in its finding
        message = (f"rank {rank} was killed by {name} without a Python exception"
                   + (" (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""))
        out.append(Verdict(RankKilled.code, FAIL, message, message=message, ranks=(rank,),
                           details={"exitcode": ctx.exit_codes[rank], "signal": name}))
    return out


def _after(cause_rank: int, crashes: list[Crash], ends: list[reach.Ending], killed: dict[int, str | None]) -> str:
    """'; then rank 1 failed (Connection reset by peer), rank 2 was stopped by the launcher'."""
    parts = []
    cause = next((c for c in crashes if c.rank == cause_rank), None)
    same = [c.rank for c in crashes if c.rank != cause_rank and not c.consequence and cause is not None
            and (c.type, c.message, c.line) == (cause.type, cause.message, cause.line)]
    if same:
        parts.append(f"rank{'s' if len(same) > 1 else ''} {', '.join(map(str, same))} failed the same way")
    for c in crashes:
        if c.rank != cause_rank and c.rank not in same:
            parts.append(f"rank {c.rank} failed after it ({c.type}: {c.message[:80]})" if c.consequence
                         else f"rank {c.rank} also raised {c.type}")
    for rank, name in killed.items():
        if rank != cause_rank:
            parts.append(f"rank {rank} was killed by {name}")
    shown = {c.rank for c in crashes} | set(killed) | {cause_rank}
    stopped = sorted(e.rank for e in ends if e.how == "stopped" and e.rank not in shown)
    if stopped:
        parts.append(f"rank{'s' if len(stopped) > 1 else ''} {', '.join(map(str, stopped))} "
                     f"{'were' if len(stopped) > 1 else 'was'} stopped by the launcher")
    return "; " + "; ".join(parts) if parts else ""


def _crashed(cause: Crash, crashes: list[Crash], ends: list[reach.Ending], killed: dict[int, str | None]) -> Verdict:
    check = {
        "CudaNotEmulated": CudaNotEmulated,
        "SpawnUnderLauncherError": SpawnUnderLauncher,
    }.get(cause.type, RankCrashed)
    where = _at(cause.path, cause.line, cause.function)
    if cause.reraised_as:
        # The handler only passed the original's message on: the original's line is the one to fix.
        where += f", re-raised as {cause.reraised_as}{_at(cause.reraised_path, cause.reraised_line, cause.reraised_function)}"
    lead = ""
    if cause.consequence:
        # Only broken connections: the rank that left first is why.
        leaver = next((e for e in ends if e.how in ("exited", "returned") and e.rank != cause.rank
                       and (e.at is None or e.at <= cause.time)), None)
        if leaver is not None:
            lead = (f"rank {leaver.rank} {leaver.describe()} while the other ranks were still in a "
                    "collective; then ")
    others = sorted({c.rank for c in crashes if c.rank != cause.rank} | set(killed) - {cause.rank})
    message = f"{lead}rank {cause.rank} raised {cause.type}: {cause.message}{where}" \
        + _after(cause.rank, crashes, ends, killed)
    if check is not RankCrashed:
        message = f"rank {cause.rank}: {cause.message}"
    return Verdict(
        check.code, FAIL, message, message=message, ranks=(cause.rank,), path=cause.path, line=cause.line,
        details={
            "exception": cause.type,
            **({"reraised": {"exception": cause.reraised_as, "path": cause.reraised_path,
                             "line": cause.reraised_line, "function": cause.reraised_function}}
               if cause.reraised_as else {}),
            "traceback": cause.traceback,
            "collateral_ranks": others,
            "at": cause.time,
            "all": [{"rank": c.rank, "type": c.type, "message": c.message, "where": c.where,
                     "consequence": c.consequence} for c in crashes],
        },
    )


def _at(path: str | None, line: int | None, function: str | None) -> str:
    """' at train.py:12 (in main)', or '' without a frame of the script."""
    if not path:
        return ""
    return f" at {os.path.basename(path)}:{line}" + (f" (in {function})" if function else "")


PROBE = Probe(NAME, (RankCrashed, CudaNotEmulated, SpawnUnderLauncher, RankKilled, EndedBeforeTraining), judge, capture,
              order=2, always=True)
