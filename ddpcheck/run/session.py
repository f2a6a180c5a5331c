"""One rank's ddpcheck state: identity, cadence, the per-rank record, our gloo group, step hooks.

Torch-free at import. `install_core` (called once torch is imported) wraps
`init_process_group`/`destroy_process_group` and registers the global optimizer step hooks; the
probes hang their callbacks on the lists below. See bootstrap.py for the probe interface.

The per-rank record is one JSON file, `<record_dir>/rank-<R>.json`, rewritten atomically at
checked steps (at most once a second), at epoch ends and at exit, so a rank that crashes or is
killed still leaves what it checked so far. Layout: see REPORT.md, "Per-rank records".
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable

from ddpcheck.run.options import RunOptions

RECORD_VERSION = 1
# The values exchanged over our gloo group at every checked step, one int64 each (-1: none).
SLOTS = ("grads", "params", "buffers", "inputs")


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class Session:
    def __init__(self, options: RunOptions, target: str = ""):
        self.options = options
        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.under_launcher = "TORCHELASTIC_RUN_ID" in os.environ or "TORCHELASTIC_USE_AGENT_STORE" in os.environ
        self.checked = 0  # of which checked
        self.step = 0  # optimizer.step() calls so far on this rank (all optimizers)
        self.group = None  # ddpcheck's own gloo process group, once the user's one exists
        self.sections: dict[str, dict[str, Any]] = {}
        self.notes: list[dict[str, Any]] = []
        self.before_step: list[Callable[[Any, int], None]] = []  # (optimizer, step), before step()
        self.after_step: list[Callable[[Any, int], None]] = []  # after step(), before the exchange
        self.on_exchange: list[Callable[[int, list[list[int]]], None]] = []  # (step, rows per rank)
        self.before_init: list[Callable[[dict], None]] = []  # may edit init_process_group's kwargs
        self.after_init: list[Callable[[], None]] = []
        self.at_end: list[Callable[[str], None]] = []  # (why) final state, before the group goes
        self.on_ddp_init: list[Callable[[Any], None]] = []  # (ddp) after DDP.__init__
        self.on_ddp_forward: list[Callable[[Any, tuple, dict], None]] = []  # (ddp, args, kwargs)
        self.ddp_modules: list[Any] = []  # weakrefs to every DDP object made on this rank
        self.param_names: dict[int, str] = {}  # id(parameter) -> its name in the wrapped module
        # Forwards through DDP since the last optimizer step, and how many ran under no_sync().
        self.window = {"forwards": 0, "unsynced": 0}
        self.staged: dict[str, int] = {}
        self.ended = False
        self.exchange_ok = True
        # Inside DDP's Join() context ranks may make different numbers of steps: a collective of
        # ours there could wait for a rank that has left the loop, so the live exchange pauses
        # (the records are still compared after the job).
        self.uneven = False
        self._last_flush = 0.0
        self.record_path = (
            os.path.join(options.record_dir, f"rank-{self.rank}.json") if options.record_dir else None
        )
        self.meta = {
            "version": RECORD_VERSION, "rank": self.rank, "world_size": self.world_size,
            "local_rank": self.local_rank, "pid": os.getpid(), "target": target,
            "started": time.time(), "status": "running", "exit_code": None, "error": None,
        }

    # --- what probes call -------------------------------------------------------------------
    def section(self, name: str) -> dict[str, Any]:
        """The probe's own JSON-serialisable part of this rank's record."""
        return self.sections.setdefault(name, {})

    def note(self, code: str, message: str, **details: Any) -> None:
        """A finding this rank can tell on its own (e.g. a rewritten init_method); the launcher
        turns every note into a Finding (deduplicated across ranks)."""
        self.notes.append({"code": code, "message": message, "details": details})
        self.flush(force=True)

    def is_checked(self, step: int) -> bool:
        return self.options.is_checked(step)

    def enabled(self, probe: str) -> bool:
        return probe in self.options.checks

    def stage(self, slot: str, value: int) -> None:
        """A digest to compare across ranks at this checked step (one int per SLOT)."""
        self.staged[slot] = int(value)

    def progress(self, message: str) -> None:
        if self.rank == 0 and not self.options.quiet:
            print(f"ddpcheck: {message}", file=sys.stderr, flush=True)

    # --- the record ---------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {**self.meta, "step": self.step, "exchange_ok": self.exchange_ok,
                "notes": self.notes, "probes": self.sections, "written": time.time()}

    def flush(self, force: bool = False) -> None:
        if self.record_path is None:
            return
        now = time.monotonic()
        if not force and now - self._last_flush < 1.0:
            return
        self._last_flush = now
        tmp = f"{self.record_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as fh:
                json.dump(self.snapshot(), fh)
            os.replace(tmp, self.record_path)
        except (OSError, TypeError, ValueError) as exc:  # never break the user's run over a record
            print(f"ddpcheck: could not write the rank record: {exc}", file=sys.stderr)

    def end(self, why: str) -> None:
        """Capture the final state once (at destroy_process_group, or at exit if never called)."""
        if self.ended:
            return
        self.ended = True
        for fn in self.at_end:
            _guard(fn, why)

    def finish(self, exit_code: int, error: BaseException | None = None) -> None:
        self.end("exit")
        self.meta["status"] = "finished"
        self.meta["ended_at"] = time.time()
        self.meta["exit_code"] = exit_code
        if error is not None:
            self.meta["error"] = {
                "type": type(error).__name__, "message": str(error),
                "traceback": "".join(traceback.format_exception(error))[-8000:],
            }
        self.flush(force=True)

    # --- the step machinery (called from the hooks install_core registers) --------------------
    def _before(self, optimizer) -> None:
        step = self.step + 1
        if not self.is_checked(step):
            return
        for fn in self.before_step:
            _guard(fn, optimizer, step)

    def _after(self, optimizer) -> None:
        self.step += 1
        step = self.step
        if not self.is_checked(step):
            self.end_window()
            return
        self.checked += 1
        for fn in self.after_step:
            _guard(fn, optimizer, step)
        rows = self._exchange(step)
        if rows is not None:
            for fn in self.on_exchange:
                _guard(fn, step, rows)
        self.staged = {}
        self.end_window()
        self.flush()
        if step in (1, self.options.check_first) or step > self.options.check_first:
            live = "compared across ranks" if rows is not None else "recorded"
            self.progress(f"optimizer step {step} checked ({self.checked} so far, {live})")

    def end_window(self) -> None:
        self.window = {"forwards": 0, "unsynced": 0}

    def ddps(self) -> list[Any]:
        return [m for m in (ref() for ref in self.ddp_modules) if m is not None]

    def name_of(self, param, fallback: str) -> str:
        return self.param_names.get(id(param), fallback)

    def _exchange(self, step: int) -> list[list[int]] | None:
        """All-gather this step's digests over ddpcheck's own gloo group (never the user's)."""
        if self.group is None or not self.exchange_ok or self.world_size < 2 or self.uneven:
            return None
        import torch
        import torch.distributed as dist

        mine = torch.tensor([step] + [self.staged.get(s, -1) for s in SLOTS], dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        try:
            dist.all_gather(out, mine, group=self.group)
        except Exception as exc:  # a rank left or stopped stepping: keep the run, drop live checks
            self.exchange_ok = False
            self.meta["exchange_error"] = f"{type(exc).__name__}: {exc}"[:500]
            return None
        return [t.tolist() for t in out]


def _guard(fn, *args) -> None:
    """A probe's failure must never change the user's run: report it on stderr and go on."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - deliberately broad, see docstring
        name = getattr(fn, "__qualname__", repr(fn))
        print(f"ddpcheck: internal error in {name}: {type(exc).__name__}: {exc}", file=sys.stderr)


def install_core(session: Session) -> None:
    """Wrap init/destroy_process_group and register the global optimizer step hooks."""
    import functools
    from datetime import timedelta

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    register_optimizer_step_pre_hook(lambda opt, args, kwargs: session._before(opt))
    register_optimizer_step_post_hook(lambda opt, args, kwargs: session._after(opt))

    original_init = c10d.init_process_group
    original_destroy = c10d.destroy_process_group

    @functools.wraps(original_init)
    def init_process_group(*args, **kwargs):
        names = ["backend", "init_method", "timeout", "world_size", "rank", "store", "group_name",
                 "pg_options", "device_id"]
        kwargs.update(dict(zip(names, args)))
        for fn in session.before_init:
            fn(kwargs)  # may rewrite kwargs; errors here are ours to see, not swallowed silently
        result = original_init(**kwargs)
        if session.group is None:
            try:
                # Same place in every rank's program order, so every rank creates it together.
                session.group = dist.new_group(backend="gloo", timeout=timedelta(
                    seconds=float(os.environ.get("DDPCHECK_EXCHANGE_TIMEOUT", "120"))))
            except Exception as exc:  # noqa: BLE001
                session.meta["group_error"] = f"{type(exc).__name__}: {exc}"[:500]
        for fn in session.after_init:
            _guard(fn)
        return result

    @functools.wraps(original_destroy)
    def destroy_process_group(group=None):
        if group is None or group is c10d.GroupMember.WORLD:
            session.end("destroy_process_group")
            session.group = None  # destroyed with the default group
        return original_destroy(group)

    for module in (c10d, dist):
        module.init_process_group = init_process_group
        module.destroy_process_group = destroy_process_group

    _wrap_ddp(session)
    _watch_join(session)


def _watch_join(session: Session) -> None:
    import functools

    from torch.distributed.algorithms.join import Join

    original_enter, original_exit = Join.__enter__, Join.__exit__

    @functools.wraps(original_enter)
    def __enter__(self):
        session.uneven = True
        return original_enter(self)

    @functools.wraps(original_exit)
    def __exit__(self, *exc):
        try:
            return original_exit(self, *exc)
        finally:
            session.uneven = False
            session.meta["used_join"] = True

    Join.__enter__, Join.__exit__ = __enter__, __exit__


def _wrap_ddp(session: Session) -> None:
    """Know every DDP object and each forward through it (patched on the class, so names the
    user bound before or after import all see it)."""
    import functools
    import weakref

    from torch.nn.parallel import DistributedDataParallel as DDP

    original_init = DDP.__init__
    original_forward = DDP.forward

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        session.ddp_modules.append(weakref.ref(self))
        for name, param in self.module.named_parameters():
            session.param_names.setdefault(id(param), name)
        for fn in session.on_ddp_init:
            _guard(fn, self)

    @functools.wraps(original_forward)
    def forward(self, *args, **kwargs):
        session.window["forwards"] += 1
        if not getattr(self, "require_backward_grad_sync", True):
            session.window["unsynced"] += 1
        for fn in session.on_ddp_forward:
            _guard(fn, self, args, kwargs)
        return original_forward(self, *args, **kwargs)

    DDP.__init__ = __init__
    DDP.forward = forward
