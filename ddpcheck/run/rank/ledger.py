"""The collective ledger of one rank: every collective it enters, its own and DDP's, with a running
hash per group, the last few calls, and how much work the rank did (optimizer steps, DDP forwards
and synced backwards, batches per data loader pass).

What is recorded, and where it is hooked:

- the `torch.distributed` collectives the user's code calls (wrapped on the module, so that
  ZeroRedundancyOptimizer's and SyncBatchNorm's calls, made through it, count too);
- DDP's gradient all-reduce: a DDP forward with gradient sync on makes the next
  `torch.autograd.backward` all-reduce the buckets, so that backward is one call whose signature
  is DDP's bucket layout; DDP's buffer broadcast (`_sync_buffers`) and its start-up broadcasts
  (`__init__`) are calls too;
- optimizer steps (the global step hook), DDP forwards, and each data loader pass (a pass starts
  with `iter(loader)` and ends when the loader is exhausted, or when the rank leaves it).

Cost: one Python wrapper per collective and per batch, a crc32 of a short string per collective,
stores into the live file (live.py). Nothing crosses ranks here; the running hash travels with the
checked-step exchange and the recent calls with the hang watchdog's report.
"""

from __future__ import annotations

import collections
import functools
import inspect
import os
import sys
import threading
import time
import weakref
import zlib
from types import FrameType
from typing import Any, Callable

from ddpcheck.run import calls as calls_mod
from ddpcheck.run import live as live_mod
from ddpcheck.run.calls import DDP_BACKWARD, DDP_BUFFERS, DDP_INIT, POINT_TO_POINT, WORLD, Call, CallLog

RECENT = live_mod.RING  # calls kept per group for the cross-rank comparison
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv",
)  # fmt: skip
PASSES_KEPT = 200  # data loader passes kept in the record (the oldest are dropped first)


_KEYS: dict[tuple[str, str], bytes] = {}  # (op, signature) -> the bytes the running hash takes in


class GroupLog:
    __slots__ = ("entered", "hash", "recent")

    def __init__(self) -> None:
        self.entered = 0
        self.hash = 0
        self.recent: collections.deque[Call] = collections.deque(maxlen=RECENT)

    def log(self, current: Call | None) -> CallLog:
        return CallLog(self.entered, tuple(self.recent), current)


class Pass:
    """One pass over one data loader on this rank."""

    __slots__ = ("loader", "number", "site", "batches", "steps0", "forwards0", "ended", "closed")

    def __init__(self, loader: int, number: int, site: str | None, steps0: int, forwards0: int) -> None:
        self.loader, self.number, self.site = loader, number, site
        self.batches = 0
        self.steps0, self.forwards0 = steps0, forwards0
        self.ended = False  # the loader ran out (StopIteration)
        self.closed: dict[str, int] | None = None  # steps and forwards made during the pass, once over

    def to_json(self, ledger: "Ledger") -> dict[str, Any]:
        counts = self.closed or {"steps": ledger.steps - self.steps0, "forwards": ledger.forwards - self.forwards0}
        return {"loader": self.loader, "pass": self.number, "site": self.site, "batches": self.batches,
                "ended": self.ended, "open": self.closed is None, **counts}


class Ledger:
    """Updated on the training thread; the hang watchdog reads it from its own thread."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupLog] = {}
        self.stack: list[Call] = []  # calls entered and not left (innermost last)
        self.ours: str | None = None  # ddpcheck's own traffic in flight, e.g. the check exchange
        self.events = 0
        self.last_progress = time.monotonic()
        self.steps = 0
        self.forwards = 0
        self.backwards = 0
        self.passes: collections.deque[Pass] = collections.deque(maxlen=PASSES_KEPT)
        self.current_pass: Pass | None = None
        self.live: live_mod.LiveFile | None = None
        self.on_pass_end: Callable[[], None] | None = None  # the record is written when a pass ends
        self.joins = 0  # depth of DDP Join() contexts the rank is in (sequences differ by design there)
        self.restarts = 0  # times the sequences started afresh (after a Join context)
        # Sizes (elements) of the tensors the user's own reducing collectives took since the
        # gradient check last read them: what tells gradients averaged by hand from a logged loss.
        self.reduced_sizes: list[int] = []
        self.lock = threading.Lock()  # enter/leave from several threads stay consistent

    @property
    def current(self) -> Call | None:
        return self.stack[-1] if self.stack else None

    def world(self) -> GroupLog:
        return self.groups.setdefault(WORLD, GroupLog())

    # --- events ---------------------------------------------------------------------------------
    def enter(self, op: str, sig: str, site: str | None, group: str = WORLD) -> Call:
        with self.lock:
            log = self.groups.get(group)
            if log is None:
                log = self.groups[group] = GroupLog()
            log.entered += 1
            call = Call(log.entered, op, sig, site, self.steps, group)
            key = _KEYS.get((op, sig))
            if key is None:
                key = _KEYS[(op, sig)] = f"{op}|{sig}".encode() if len(_KEYS) < 4096 else b""
            log.hash = zlib.crc32(key or f"{op}|{sig}".encode(), log.hash)
            log.recent.append(call)
            self.stack.append(call)
            if self.live is not None and group == WORLD:
                self.live.put_call(call)
                self.live.set_call(log.entered, log.hash, log.entered)
                self.live.set("progress_ms", int(time.time() * 1000))
        self.progress()
        return call

    def leave(self, call: Call) -> None:
        with self.lock:
            stack = self.stack
            if stack and stack[-1] is call:
                stack.pop()
            elif call in stack:
                stack.remove(call)
            if self.live is not None and call.group == WORLD:
                world = self.groups[WORLD]
                inner = next((c.seq for c in reversed(stack) if c.group == WORLD), 0)
                self.live.set_call(world.entered, world.hash, inner)
        self.progress()

    def enter_ours(self, what: str) -> None:
        self.ours = what
        if self.live is not None:
            self.live.set("ours", 1)
        self.progress()

    def leave_ours(self) -> None:
        self.ours = None
        if self.live is not None:
            self.live.set("ours", 0)
        self.progress()

    def progress(self) -> None:
        self.events += 1
        self.last_progress = time.monotonic()

    def stepped(self) -> None:
        self.steps += 1
        if self.live is not None:
            self.live.set("steps", self.steps)
            self.live.set("progress_ms", int(time.time() * 1000))
        self.progress()

    def forwarded(self) -> None:
        self.forwards += 1
        if self.live is not None:
            self.live.set("forwards", self.forwards)
        self.progress()

    def start_pass(self, loader: int, number: int, site: str | None) -> Pass:
        self.close_pass(self.current_pass)
        p = Pass(loader, number, site, self.steps, self.forwards)
        self.passes.append(p)
        self.current_pass = p
        if self.live is not None:
            self.live.set_pass({"loader": loader, "pass": number, "site": site})
            self.live.set("pass_serial", len(self.passes))
            self.live.set("pass_batches", 0)
            self.live.set("pass_steps0", self.steps)
            self.live.set("pass_forwards0", self.forwards)
            self.live.set("pass_ended", 0)
        self.progress()
        return p

    def batch(self, p: Pass) -> None:
        p.batches += 1
        if self.live is not None and p is self.current_pass:
            self.live.set("pass_batches", p.batches)
        self.progress()

    def end_pass(self, p: Pass) -> None:
        if p.ended:  # StopIteration raised again by a loader iterated past its end
            return
        p.ended = True
        self.close_pass(p)
        if self.live is not None and p is self.current_pass:
            self.live.set("pass_ended", 1)
        if self.on_pass_end is not None:
            try:
                self.on_pass_end()
            except Exception:  # noqa: BLE001 - the record is best effort; the loop must go on
                pass

    def close_pass(self, p: Pass | None) -> None:
        if p is not None and p.closed is None:
            p.closed = {"steps": self.steps - p.steps0, "forwards": self.forwards - p.forwards0}

    def join_entered(self) -> None:
        self.joins += 1

    def join_left(self) -> None:
        """Inside DDP's Join() context the ranks that ran out of inputs shadow the others'
        collectives with calls of their own, so the sequences differ by design. Every rank leaves
        the context together, at the same point of its program: from there they start afresh."""
        self.joins = max(self.joins - 1, 0)
        if self.joins == 0:
            self.restart()

    def restart(self) -> None:
        """Start every group's count and hash afresh (all ranks do it at the same point)."""
        with self.lock:
            self.groups = {}
            self.restarts += 1
            if self.live is not None:
                self.live.set_call(0, 0, 0)
        self.progress()

    # --- what others read -------------------------------------------------------------------------
    def logs(self) -> dict[str, CallLog]:
        with self.lock:
            current = self.current
            return {name: log.log(current if current is not None and current.group == name else None)
                    for name, log in self.groups.items()}

    def counters(self) -> dict[str, Any]:
        return {"steps": self.steps, "forwards": self.forwards, "backwards": self.backwards,
                "pass": None if self.current_pass is None else self.current_pass.to_json(self)}

    def section(self) -> dict[str, Any]:
        """What goes into the rank record: every group's count, hash and recent calls, the counters
        and the data loader passes."""
        return {
            "groups": {name: {**log.to_json(), "hash": self.groups[name].hash} for name, log in self.logs().items()},
            "steps": self.steps, "forwards": self.forwards, "backwards": self.backwards,
            "passes": [p.to_json(self) for p in self.passes], "restarts": self.restarts,
        }


LEDGER = Ledger()
_ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # ddpcheck/run/
# ddpcheck modules that wrap a collective on the user's behalf (the call is still the user's).
_PASS_THROUGH = {os.path.join(_ours, "rank", "emulate.py"), os.path.join(_ours, "checks", "timing.py")}


# --- the user's collectives ------------------------------------------------------------------------
def _reduce_op(op: Any) -> str:
    name = str(getattr(op, "name", op) or "SUM").rpartition(".")[2].lower()
    return "" if name == "sum" else f" {name}"


_dtype_names: dict[Any, str] = {}


def _tensor_text(value: Any) -> str:
    """'float32[4, 10]' for a tensor (or the first of a list of tensors), '' otherwise."""
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    if dtype is None or shape is None:
        return ""
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).removeprefix("torch.")
    return f"{name}{list(shape)}"


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 0


def _dtype_text(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else ""


def _root(a: dict[str, Any], name: str) -> str:
    value = a.get(name)
    word = "from" if name == "src" else "to"
    return f" {word} rank {value}" if value is not None else ""


# op -> how its signature is read from the bound arguments (what every rank must pass alike).
_SIGNATURES: dict[str, Callable[[dict[str, Any]], str]] = {
    "all_reduce": lambda a: _tensor_text(a.get("tensor")) + _reduce_op(a.get("op")),
    "broadcast": lambda a: _tensor_text(a.get("tensor")) + _root(a, "src"),
    "reduce": lambda a: _tensor_text(a.get("tensor")) + _reduce_op(a.get("op")) + _root(a, "dst"),
    "all_gather": lambda a: _tensor_text(a.get("tensor")) + f" into {_length(a.get('tensor_list'))}",
    "all_gather_into_tensor": lambda a: _tensor_text(a.get("input_tensor")),
    "reduce_scatter": lambda a: _tensor_text(a.get("output")) + _reduce_op(a.get("op")),
    "reduce_scatter_tensor": lambda a: _tensor_text(a.get("input")) + _reduce_op(a.get("op")),
    # Split sizes may differ per rank by design: only the dtype must agree.
    "all_to_all_single": lambda a: _dtype_text(a.get("input")),
    "all_to_all": lambda a: f"{_length(a.get('input_tensor_list'))} tensors",
    "gather": lambda a: _tensor_text(a.get("tensor")) + _root(a, "dst"),
    "scatter": lambda a: _tensor_text(a.get("tensor")) + _root(a, "src"),
    "broadcast_object_list": lambda a: f"{_length(a.get('object_list'))} objects" + _root(a, "src"),
    "gather_object": lambda a: _root(a, "dst").strip(),
    "scatter_object_list": lambda a: _root(a, "src").strip(),
}

def _no_signature(bound: dict[str, Any]) -> str:
    return ""


_group_labels: dict[int, tuple[Any, str]] = {}


def group_label(group: Any) -> str:
    """'world' for the default group and any group of every rank; else 'ranks 0, 1'."""
    if group is None:
        return WORLD
    known = _group_labels.get(id(group))
    if known is not None and known[0] is group:
        return known[1]
    import torch.distributed as dist

    try:
        ranks = dist.get_process_group_ranks(group)
        label = WORLD if len(ranks) == dist.get_world_size() else "ranks " + ", ".join(map(str, sorted(ranks)))
    except Exception:  # noqa: BLE001 - a group torch does not know: compare it on its own
        label = f"group {id(group):x}"
    _group_labels[id(group)] = (group, label)
    return label


# The argument that holds what a reducing collective reduces, per op.
_REDUCING_INPUTS = {"all_reduce": "tensor", "reduce": "tensor", "reduce_scatter": "input_list",
                    "reduce_scatter_tensor": "input", "all_to_all_single": "input"}


def _numel(value: Any) -> int:
    """Elements in a tensor or a list of tensors (0 for anything else)."""
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    numel = getattr(value, "numel", None)
    try:
        return int(numel()) if callable(numel) else 0
    except Exception:  # noqa: BLE001 - an odd argument: counted as nothing
        return 0


def _recorded(op: str, fn: Callable[..., Any], site_of: Callable[[int], str | None]) -> Callable[..., Any]:
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    signature = _SIGNATURES.get(op, _no_signature)

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        # ddpcheck's own check traffic is not the user's: leave it out of the record. The caller
        # is the first frame past ddpcheck's wrappers (which stand between the user and torch, or
        # between ddpcheck's exchange and torch).
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename in _PASS_THROUGH:
            frame = frame.f_back
        caller = frame.f_code.co_filename if frame is not None else ""
        if op in POINT_TO_POINT or caller.startswith(_ours):
            return fn(*args, **kwargs)
        bound = dict(zip(names, args))
        bound.update(kwargs)
        if isinstance(bound.get("group"), int):  # GroupMember.NON_GROUP_MEMBER: torch makes no call
            return fn(*args, **kwargs)
        try:
            sig = signature(bound)
            group = group_label(bound.get("group"))
        except Exception:  # noqa: BLE001 - never let the record break the user's call
            sig, group = "", WORLD
        call = LEDGER.enter(op, sig, site_of(1), group)
        if op in _REDUCING_INPUTS and len(LEDGER.reduced_sizes) < 4096:
            LEDGER.reduced_sizes.append(_numel(bound.get(_REDUCING_INPUTS[op])))
        try:
            return fn(*args, **kwargs)
        finally:
            LEDGER.leave(call)

    setattr(collective, "__ddpcheck_ledger__", True)
    return collective


# --- DDP's collectives -----------------------------------------------------------------------------
_pending: list[Any] = []  # weakrefs to DDP modules whose forward set up a gradient all-reduce
_bucket_cache: dict[tuple[int, bool], str] = {}


def bucket_sizes(ddp: Any) -> str:
    """DDP's bucket layout, from its logging data (read once before and once after the rebuild)."""
    rebuilt = bool(getattr(ddp, "_has_rebuilt_buckets", False))
    key = (id(ddp), rebuilt)
    text = _bucket_cache.get(key)
    if text is None:
        try:
            data = ddp._get_ddp_logging_data()
            raw = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or "")
            sizes = [int(s) for s in raw.replace(",", " ").split()]
        except Exception:  # noqa: BLE001 - older or unusual DDP: the call is still counted
            sizes = []
        text = calls_mod.buckets_text(sizes) if sizes else ""
        if len(sizes) > 6:
            text += f" (layout {zlib.crc32(raw.encode()):08x})"
        _bucket_cache[key] = text
    return text


def forward_started(ddp: Any) -> None:
    """A forward through DDP: with grad sync on, the next backward all-reduces its buckets (the
    condition is DDP's own, in `_pre_forward`)."""
    import torch

    LEDGER.forwarded()
    if torch.is_grad_enabled() and getattr(ddp, "require_backward_grad_sync", True):
        if not any(ref() is ddp for ref in _pending):
            _pending.append(weakref.ref(ddp))


def _wrap_backward(site_of: Callable[[int], str | None]) -> None:
    import torch.autograd

    original = torch.autograd.backward
    if getattr(original, "__ddpcheck_ledger__", False):
        return

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        models = [m for m in (ref() for ref in _pending) if m is not None]
        if not models:
            return original(*args, **kwargs)
        _pending.clear()
        LEDGER.backwards += 1
        if LEDGER.live is not None:
            LEDGER.live.set("backwards", LEDGER.backwards)
        sig = "; ".join(filter(None, (bucket_sizes(m) for m in models)))
        call = LEDGER.enter(DDP_BACKWARD, sig, site_of(1), group_label(getattr(models[0], "process_group", None)))
        try:
            return original(*args, **kwargs)
        finally:
            LEDGER.leave(call)

    setattr(backward, "__ddpcheck_ledger__", True)
    torch.autograd.backward = backward


def _wrap_ddp(site_of: Callable[[int], str | None]) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    sync_buffers: Callable[[Any], Any] = DDP._sync_buffers
    init: Callable[..., None] = DDP.__init__
    if getattr(sync_buffers, "__ddpcheck_ledger__", False):
        return

    @functools.wraps(sync_buffers)
    def _sync_buffers(self: Any) -> Any:
        count = len(getattr(self, "modules_buffers", ()) or ())
        call = LEDGER.enter(DDP_BUFFERS, f"{count} buffers", site_of(1),
                            group_label(getattr(self, "process_group", None)))
        try:
            return sync_buffers(self)
        finally:
            LEDGER.leave(call)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        call = LEDGER.enter(DDP_INIT, "", site_of(1), group_label(kwargs.get("process_group")))
        try:
            init(self, *args, **kwargs)
        finally:
            LEDGER.leave(call)

    setattr(_sync_buffers, "__ddpcheck_ledger__", True)
    setattr(DDP, "_sync_buffers", _sync_buffers)
    setattr(DDP, "__init__", __init__)


# --- data loader passes ----------------------------------------------------------------------------
_loaders: "weakref.WeakKeyDictionary[Any, list[int]]" = weakref.WeakKeyDictionary()  # loader -> [ordinal, passes]


def _wrap_loaders(site_of: Callable[[int], str | None]) -> None:
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original_iter = DataLoader.__iter__
    original_next = _BaseDataLoaderIter.__next__
    if getattr(original_next, "__ddpcheck_ledger__", False):
        return

    @functools.wraps(original_iter)
    def __iter__(self: Any) -> Any:
        it = original_iter(self)
        state = _loaders.get(self)
        if state is None:
            state = _loaders[self] = [len(_loaders), 0]
        p = LEDGER.start_pass(state[0], state[1], site_of(1))
        state[1] += 1
        try:
            setattr(it, "_ddpcheck_pass", p)
        except AttributeError:  # an iterator class with __slots__: the pass is still counted
            pass
        return it

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        p = getattr(self, "_ddpcheck_pass", None)
        try:
            data = original_next(self)
        except StopIteration:
            if p is not None:
                LEDGER.end_pass(p)
            raise
        if p is not None:
            LEDGER.batch(p)
        return data

    setattr(__next__, "__ddpcheck_ledger__", True)
    setattr(DataLoader, "__iter__", __iter__)
    setattr(_BaseDataLoaderIter, "__next__", __next__)


def install(site_of: Callable[[int], str | None], nested: Callable[[], bool] = lambda: False) -> None:
    """Wrap the collectives, DDP and the data loaders (once per process). `site_of(depth)` names the
    user's file:line of the caller `depth` frames up; `nested()` is true inside an optimizer step
    that another optimizer's step started (not a step of its own)."""
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_post_hook

    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, "__ddpcheck_ledger__", False):
            setattr(dist, name, _recorded(name, original, site_of))
    _wrap_backward(site_of)
    _wrap_ddp(site_of)
    _wrap_loaders(site_of)
    register_optimizer_step_post_hook(lambda *a, **k: None if nested() else LEDGER.stepped())


def open_live(record_dir: str, rank: int) -> None:
    """Start mirroring the ledger into the live file (once the rank is known)."""
    if not record_dir or LEDGER.live is not None:
        return
    try:
        live = live_mod.LiveFile(live_mod.path_for(record_dir, rank))
    except OSError as exc:
        print(f"ddpcheck: could not create the live state file: {exc}", file=sys.stderr)
        return
    ledger = LEDGER
    world = ledger.world()
    live.set("steps", ledger.steps)
    live.set("forwards", ledger.forwards)
    live.set("backwards", ledger.backwards)
    for call in world.recent:
        live.put_call(call)
    live.set("entered", world.entered)
    live.set("hash", world.hash)
    ledger.live = live
