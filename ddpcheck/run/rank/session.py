"""One rank's ddpcheck state: identity, cadence, the per-rank record, ddpcheck's gloo group, and the
hook lists that probes attach to. Torch-free at import.

The hook layer (rank/hooks.py) drives the lists below from torch's own events; probes and
ddpcheck's run-time support append callbacks to them in their `capture(session)`:

| list | called | with |
|---|---|---|
| `before_init` | before `init_process_group` | its keyword arguments (a dict the callback may edit) |
| `after_init` | after it (ddpcheck's group exists) | - |
| `before_ddp_init` | before `DistributedDataParallel.__init__` runs (torch's own checks included) | the module to wrap, the `process_group` argument or None |
| `on_ddp_init` | after `DistributedDataParallel.__init__` | the DDP module |
| `on_ddp_forward` | before every DDP forward | the DDP module, args, kwargs |
| `before_step` | before a *checked* optimizer step | optimizer, step (1-based) |
| `after_step` | after a checked step, before the exchange | optimizer, step |
| `before_exchange` / `after_exchange` | around the wait for a checked step's all-gather | step |
| `on_exchange` | when that all-gather has finished (at the next checked step, or at the end) | step, every rank's row: [step, the step's call site, one int64 per `add_slot`] |
| `on_join_enter` / `on_join_exit` | entering / leaving DDP's `Join()` context (uneven inputs); on leaving, the step numbers are realigned first (`align_steps`) | - |
| `at_end` | once: destroy_process_group, or exit | why ("destroy_process_group" / "exit") |
| `before_finish` | when the rank's program has ended | exit code, the uncaught exception or None |
| `after_finish` | after the final record is written | - |
| `on_phase` | at the start and end of every phase of every step | phase, True at the start / False at the end |

The phases are "data" (the DataLoader iterator's `__next__`), "forward" (a DDP forward),
"backward" (`torch.autograd.backward`, hence `loss.backward()`) and "step" (an optimizer step:
its start is signalled after ddpcheck's own `before_step` work, its end before `after_step`, so
ddpcheck's time stays out of it). They cost a truthiness test while nobody listens.

An optimizer step taken inside another one's step (ZeroRedundancyOptimizer steps its local
optimizer; a wrapper optimizer steps the one it wraps) is part of the outer step: only the
outermost step counts, and the hooks see it alone.

Every rank counts its optimizer steps, so an optimizer that some ranks step alone (a reference
model trained on rank 0 only, to compare with the distributed one) shifts their count: the same
step number then names different points of training. The exchange carries the line each rank's
checked step was called from; where those lines differ the ranks are no longer comparable step
by step, so the live exchange stops (ddpcheck's own all-gathers would no longer pair up) and the
judges compare only the steps before (`steps_misaligned` in the record).

An unchecked optimizer step costs the hook layer a counter increment and one comparison (with
`next_checked`); no callback runs and nothing is allocated. The per-rank record is one JSON file, `<record_dir>/rank-<R>.json`, rewritten
atomically at checked steps (at most once a second, but at once at the first), at the first DDP
forward, at epoch ends, when the rank is stopped (SIGTERM: rank/stopping.py) and at exit, so a rank
that crashes or is stopped leaves what it did so far (layout: REPORT.md, "Per-rank records").
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, TypeVarTuple, Unpack

from ddpcheck.run.atomic_file import write_atomic
from ddpcheck.run.run_options import RunOptions
from ddpcheck.run.plain_text import plain
from ddpcheck.run.records import RECORD_VERSION, record_path

if TYPE_CHECKING:
    import weakref

    import torch
    from torch.distributed import ProcessGroup, Work
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim import Optimizer

_Args = TypeVarTuple("_Args")


END_EXCHANGE_TIMEOUT_S = 10.0  # how long the end of a rank waits for its last exchange
PROGRESS_EVERY_S = 5.0  # after the first checked steps, at most one "step N checked" line this often


def env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class Session:
    def __init__(self, options: RunOptions, target: str = "", *, spawn_parent: bool = False) -> None:
        self.options = options
        self.rank = env_int("RANK", 0)
        self.world_size = env_int("WORLD_SIZE", 1)
        self.local_rank = env_int("LOCAL_RANK", 0)
        self.under_launcher = "TORCHELASTIC_RUN_ID" in os.environ or "TORCHELASTIC_USE_AGENT_STORE" in os.environ
        # The plain parent process of a spawn-style script: it only starts the workers, and
        # writes no record of its own (each worker becomes a rank).
        self.spawn_parent = spawn_parent
        self.checked = 0  # of which checked
        # The step number the checks use, the same on every rank at the same point of training:
        # optimizer.step() calls so far (all optimizers), realigned after DDP's Join() (align_steps).
        self.step = 0
        self.taken = 0  # optimizer.step() calls this rank really made
        self.stepping: list[int] = []  # id() of the optimizers inside their step, outermost first
        # The optimizer of the last (outermost) step: what a pass over a loader trained is read
        # from it when the pass ends, so an unchecked step pays one assignment.
        self.last_stepped: Optimizer | None = None
        self._step_site = (-1, "")  # the call site of the checked step under way (see step_site)
        self._in_flight_site = ""  # the call site of the step whose exchange is in flight
        self.next_checked = options.next_checked(0)  # the next optimizer step to check
        self.group: ProcessGroup | None = None  # ddpcheck's own gloo group, once the user's one exists
        self.steps_group: ProcessGroup | None = None  # another, for the checked steps' exchange alone
        self.sections: dict[str, dict[str, Any]] = {}
        self.notes: list[dict[str, Any]] = []
        self.before_init: list[Callable[[dict[str, Any]], None]] = []
        self.after_init: list[Callable[[], None]] = []
        self.before_ddp_init: list[Callable[[Any, Any], None]] = []
        self.on_ddp_init: list[Callable[[DistributedDataParallel], None]] = []
        self.on_ddp_forward: list[Callable[[DistributedDataParallel, tuple[Any, ...], dict[str, Any]], None]] = []
        self.before_step: list[Callable[[Optimizer, int], None]] = []
        self.after_step: list[Callable[[Optimizer, int], None]] = []
        self.before_exchange: list[Callable[[int], None]] = []
        self.after_exchange: list[Callable[[int], None]] = []
        self.on_exchange: list[Callable[[int, list[list[int]]], None]] = []
        self.on_join_enter: list[Callable[[], None]] = []
        self.on_join_exit: list[Callable[[], None]] = []
        self.at_end: list[Callable[[str], None]] = []
        self.on_phase: list[Callable[[str, bool], None]] = []
        self.before_finish: list[Callable[[int, BaseException | None], None]] = []
        self.after_finish: list[Callable[[], None]] = []
        self.ddp_modules: list[weakref.ref[DistributedDataParallel]] = []  # every DDP object made here
        self.param_names: dict[int, str] = {}  # id(parameter) -> its name in the wrapped module
        # Forwards through DDP since the last optimizer step, and how many ran under no_sync().
        self.forwards = 0
        self.unsynced = 0
        self.forwarded = False  # a DDP forward ran (and the record was written then)
        # The digests exchanged at every checked step, one int64 per slot (-1: none staged), in
        # the order the probes added them: the same on every rank, as every rank installs alike.
        self.slots: list[str] = []
        self.staged: dict[str, int] = {}
        self.ended = False
        self.exchange_ok = True
        # Inside DDP's Join() context ranks may make different numbers of steps: a collective of
        # ours there could wait for a rank that has left the loop, so the live exchange pauses
        # (the records are still compared after the job).
        self.uneven = False
        self._once: set[str] = set()
        self._in_flight: tuple[int, list[torch.Tensor], Work] | None = None  # (step, rows, work) of an exchange
        self._last_flush = 0.0
        self._last_said = 0.0  # when the last progress line was printed
        self.record_path = (
            record_path(options.record_dir, self.rank) if options.record_dir and not spawn_parent else None
        )
        self.meta: dict[str, Any] = {
            "version": RECORD_VERSION, "rank": self.rank, "world_size": self.world_size,
            "local_rank": self.local_rank, "node": env_int("GROUP_RANK", 0),
            "local_world_size": env_int("LOCAL_WORLD_SIZE", self.world_size), "pid": os.getpid(), "target": target,
            "started": time.time(), "status": "running", "exit_code": None, "error": None,
        }

    # --- what probes call -------------------------------------------------------------------
    def section(self, name: str) -> dict[str, Any]:
        """The probe's own JSON-serialisable part of this rank's record."""
        return self.sections.setdefault(name, {})

    def once(self, key: str) -> bool:
        """True the first time it is asked for `key` (a capture that several probes share)."""
        if key in self._once:
            return False
        self._once.add(key)
        return True

    def note(self, code: str, message: str, **details: Any) -> None:
        """A finding this rank can tell on its own (e.g. a rewritten init_method); the launcher
        turns every note into a Finding (deduplicated across ranks)."""
        self.notes.append({"code": code, "message": message, "details": details})
        self.flush(force=True)

    def is_checked(self, step: int) -> bool:
        return self.options.is_checked(step)

    def add_slot(self, name: str) -> int:
        """A place for one int64 in the rows of the checked-step exchange; its index in each row."""
        self.slots.append(name)
        return len(self.slots) + 1  # row[0] is the step, row[1] its call site

    def trained_since(self, step: int) -> int | None:
        """What the last optimizer step after optimizer step `step` trained (`trained_by`), or None
        if this rank took none since."""
        if self.step <= step or self.last_stepped is None:
            return None
        return trained_by(self.last_stepped)

    def stage(self, slot: str, value: int) -> None:
        """A digest to compare across ranks at this checked step, in a slot added before."""
        self.staged[slot] = int(value)

    def progress(self, message: str) -> None:
        if self.rank == 0 and not self.options.quiet:
            print(f"ddpcheck: {message}", file=sys.stderr, flush=True)

    def become_rank(self, rank: int) -> None:
        """This process is rank `rank` after all (a worker of a spawn-style script)."""
        self.rank = self.meta["rank"] = rank
        if self.options.record_dir:
            self.record_path = record_path(self.options.record_dir, rank)

    # --- the record ---------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {**self.meta, "step": self.taken, "checked": self.checked, "exchange_ok": self.exchange_ok,
                "notes": self.notes, "probes": self.sections, "written": time.time()}

    def flush(self, force: bool = False) -> None:
        if self.record_path is None:
            return
        now = time.monotonic()
        if not force and now - self._last_flush < 1.0:
            return
        self._last_flush = now
        try:
            self._write()
        except (OSError, TypeError, ValueError, RuntimeError) as exc:  # never break the user's run over a record
            print(f"ddpcheck: could not write the rank record: {exc}", file=sys.stderr)

    def _write(self) -> None:
        assert self.record_path is not None
        write_atomic(self.record_path, json.dumps(self.snapshot()))

    def stopped(self, signal_name: str, by: str) -> None:
        """The rank is being stopped from outside (rank/stopping.py): write what it has done, so
        that no judge reads a record a second or more old. RuntimeError: a dict changed while it
        was written (from a thread other than the main one); the caller may try again."""
        if self.record_path is None or self.meta.get("status") == "finished":
            return
        self.meta["stopped"] = {"signal": signal_name, "at": time.time(), "by": by}
        self._last_flush = time.monotonic()
        try:
            self._write()
        except (OSError, TypeError, ValueError) as exc:
            print(f"ddpcheck: could not write the rank record: {exc}", file=sys.stderr)

    def first_forward(self) -> None:
        """The first DDP forward of this rank: written at once, so that a rank stopped before its
        next write does not read as one that never called its model."""
        self.forwarded = True
        self.flush(force=True)

    def end(self, why: str, *, failed: bool = False) -> None:
        """Capture the final state once (at destroy_process_group, or at exit if never called);
        the last exchange is finished first, unless the rank failed (its peers may be gone)."""
        if self.ended:
            return
        self.ended = True
        if self._in_flight is not None and (not failed or self._in_flight[2].is_completed()):
            self.finish_exchange(timeout_s=END_EXCHANGE_TIMEOUT_S)
        for fn in self.at_end:
            guard(fn, why)

    def finish(self, exit_code: int, error: BaseException | None = None) -> None:
        """The rank's program has ended: final state, exit code and exception into the record."""
        for before in self.before_finish:
            guard(before, exit_code, error)
        self.end("exit", failed=bool(exit_code) or error is not None)
        self.meta["status"] = "finished"
        self.meta["ended_at"] = time.time()
        self.meta["exit_code"] = exit_code
        if error is not None:
            self.meta["error"] = {
                "type": type(error).__name__, "message": plain(str(error)),
                "traceback": plain("".join(traceback.format_exception(error)))[-8000:],
            }
        self.flush(force=True)
        for after in self.after_finish:
            guard(after)

    # --- the step machinery (called from the hooks of rank/hooks.py) ---------------------------
    def nested_step(self) -> bool:
        """True inside an optimizer step that another optimizer's step started."""
        return len(self.stepping) > 1

    def before_optimizer_step(self, optimizer: Optimizer) -> None:
        if id(optimizer) in self.stepping:  # its last step raised and never ended: start afresh
            self.stepping.clear()
        self.stepping.append(id(optimizer))
        if len(self.stepping) > 1:
            return
        if self.step + 1 == self.next_checked:
            self._step_site = step_site()
            for fn in self.before_step:
                guard(fn, optimizer, self.step + 1)
        if self.on_phase:
            self.phase("step", True)

    def after_optimizer_step(self, optimizer: Optimizer) -> None:
        if self.stepping and self.stepping[-1] == id(optimizer):
            self.stepping.pop()
        if self.stepping:  # the step of an optimizer inside another one's: part of that step
            return
        if self.on_phase:
            self.phase("step", False)
        self.step += 1
        self.taken += 1
        self.last_stepped = optimizer
        if self.step != self.next_checked:
            self.forwards = self.unsynced = 0
            return
        step = self.step
        self.next_checked = self.options.next_checked(step)
        self.checked += 1
        for fn in self.after_step:
            guard(fn, optimizer, step)
        live = self.exchange(step)
        self.staged = {}
        self.forwards = self.unsynced = 0
        # The first checked step is written at once: a rank stopped within the next second must
        # not read as one that never stepped.
        self.flush(force=self.checked == 1)
        if self.rank == 0 and not self.options.quiet and (step in (1, self.options.check_first) or (
                step > self.options.check_first and time.monotonic() - self._last_said >= PROGRESS_EVERY_S)):
            self._last_said = time.monotonic()  # (checking every step would say so every step)
            how = "compared across ranks" if live else "recorded"
            self.progress(f"optimizer step {step} checked ({self.checked} so far, {how})")

    def align_steps(self) -> None:
        """After DDP's Join() context: ranks with fewer inputs made fewer optimizer steps inside it
        (the others' all-reduces were shadowed), so the same step number now means different
        points of training. Every rank leaves the context together; agree there on the largest
        step number, so that checks compare the steps the ranks take together from here on (a
        step only some ranks took inside the context is compared with nothing)."""
        if self.group is None or not self.exchange_ok or self.world_size < 2:
            return
        import torch
        import torch.distributed as dist

        mine = torch.tensor([self.step], dtype=torch.int64)
        try:
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=self.group)
        except Exception as exc:  # a rank left: keep the run, drop live checks
            self.exchange_ok = False
            self.meta["exchange_error"] = f"{type(exc).__name__}: {exc}"[:500]
            return
        agreed = int(mine.item())
        if agreed != self.step:
            self.meta["steps_realigned"] = self.meta.get("steps_realigned", 0) + 1
            self.step = agreed
            self.next_checked = self.options.next_checked(agreed)

    def phase(self, name: str, begin: bool) -> None:
        for fn in self.on_phase:  # guard() inlined: this runs several times a step
            try:
                fn(name, begin)
            except Exception as exc:  # noqa: BLE001 - a probe's failure must never change the run
                print(f"ddpcheck: internal error in {getattr(fn, '__qualname__', repr(fn))}: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)

    def ddps(self) -> list[DistributedDataParallel]:
        return [m for m in (ref() for ref in self.ddp_modules) if m is not None]

    def name_of(self, param: object, fallback: str) -> str:
        return self.param_names.get(id(param), fallback)

    def exchange(self, step: int) -> bool:
        """Start the all-gather of this step's digests over ddpcheck's own gloo group for steps
        (never the user's), after finishing the previous one. It runs in gloo's background while the script
        computes its next steps; its rows reach `on_exchange` when it is finished: at the next
        checked step, or at the end. True if it started."""
        self.finish_exchange()
        if self.group is None or not self.exchange_ok or self.world_size < 2 or self.uneven or not self.slots:
            return False
        import torch
        from torch._C._distributed_c10d import AllgatherOptions

        mine = torch.tensor([step, self._step_site[0]] + [self.staged.get(s, -1) for s in self.slots],
                            dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        opts = AllgatherOptions()
        opts.asyncOp = True
        try:
            # Straight to the group (what `dist.all_gather` ends in): ddpcheck's own traffic needs
            # neither torch's argument checks nor the wrappers that record the user's collectives.
            work = (self.steps_group or self.group).allgather([out], [mine], opts)
        except Exception as exc:  # a rank left: keep the run, drop live checks
            self.exchange_ok = False
            self.meta["exchange_error"] = f"{type(exc).__name__}: {exc}"[:500]
            return False
        self._in_flight = (step, out, work)
        self._in_flight_site = self._step_site[1]
        return True

    def finish_exchange(self, timeout_s: float | None = None) -> None:
        """Wait for the exchange in flight (at most `timeout_s`; None: the group's timeout) and
        hand its rows to `on_exchange`. A rank blocked here waits for a rank that has not made the
        same checked step (the hang watchdog says so through `before_exchange`)."""
        if self._in_flight is None:
            return
        step, out, work = self._in_flight
        self._in_flight = None
        for before in self.before_exchange:
            guard(before, step)
        try:
            if timeout_s is None:
                work.wait()
            else:
                from datetime import timedelta

                work.wait(timedelta(seconds=timeout_s))
        except Exception as exc:  # a rank left or stopped stepping: keep the run, drop live checks
            self.exchange_ok = False
            self.meta["exchange_error"] = f"{type(exc).__name__}: {exc}"[:500]
            return
        finally:
            for after in self.after_exchange:
                guard(after, step)
        rows = [t.tolist() for t in out]
        if len({row[1] for row in rows if row[1] >= 0}) > 1:
            # The ranks took this step at different lines: their counts no longer pair up.
            self.exchange_ok = False
            self.meta["steps_misaligned"] = {"step": step, "site": self._in_flight_site}
            self.flush(force=True)
            return
        for on_exchange in self.on_exchange:
            guard(on_exchange, step, rows)


def guard(fn: Callable[[Unpack[_Args]], None], *args: Unpack[_Args]) -> None:
    """A probe's failure must never change the user's run: report it on stderr and go on."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - deliberately broad, see docstring
        name = getattr(fn, "__qualname__", repr(fn))
        print(f"ddpcheck: internal error in {name}: {type(exc).__name__}: {exc}", file=sys.stderr)


def step_site() -> tuple[int, str]:
    """(a number the same on every rank for the same line, `file:line`) of the user's line that
    called the optimizer step under way; (-1, "") where no user frame calls it. The file's base
    name, not its path: nodes may hold the script at different paths."""
    import zlib

    from ddpcheck.run.rank.sites import user_frame

    frame = user_frame(sys._getframe(1))
    if frame is None:
        return -1, ""
    text = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    return zlib.crc32(text.encode()), text


def trained_by(optimizer: Optimizer) -> int:
    """What an optimizer trains, as a key: its first parameter's identity (or its own), so that an
    optimizer made anew each epoch still trains the same model."""
    try:
        return id(optimizer.param_groups[0]["params"][0])
    except (AttributeError, IndexError, KeyError, TypeError):
        return id(optimizer)
