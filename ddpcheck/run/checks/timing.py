"""Where each rank's time goes, step by step, from hooks only.

A timed step runs from one optimizer step to the next (of the first optimizer that stepped). Inside
it, the time spent in each phase is added up where the phase happens:

- `data`: `_BaseDataLoaderIter.__next__` (waiting for the next batch; also counts the samples),
- `forward`: `DistributedDataParallel.forward`, and
- `backward`: `torch.autograd.backward` (what `loss.backward()` calls), which on return has
  waited for DDP's gradient reduction — both from the session's shared phase hooks
  (`session.on_phase`, driven by rank/hooks.py),
- `optimizer`: between the global optimizer step pre- and post-hooks, with ddpcheck's own work
  in those hooks (fingerprints, the exchange) measured apart and left out,
- `collectives`: `torch.distributed` collectives the script calls itself (not ours).

Phases never nest: a collective inside a forward (SyncBatchNorm) counts as forward. On a CUDA model
forward, backward and the optimizer step are timed with CUDA events on the current stream (the
host only queues the work), resolved a few steps later without synchronising; elsewhere with the
wall clock. Each hook costs a clock read and an addition. DDP's own timers
(`_get_ddp_logging_data`, sampled by DDP) are read at checked steps. The learning rate of each
optimizer's first param group is read at each step (for `--scaling`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

    from ddpcheck.run.rank.session import Session

PROBE_NAME = "timing"
COLUMNS = ("step", "total", "data", "forward", "backward", "optimizer", "collectives", "samples",
           "ours", "checked")
PHASE_INDEX = {name: i for i, name in enumerate(COLUMNS)}
MAX_PENDING = 32  # steps whose CUDA events may wait to be resolved
MAX_ROWS = 2048  # then every other row is dropped and only every 2nd, 4th, ... step is kept
DDP_LOG_KEYS = (
    "avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time",
    "avg_backward_compute_comm_overlap_time", "bucket_cap_bytes", "num_buckets_reduced",
    "find_unused_parameters", "unused_parameter_size", "iteration", "static_graph",
    "total_parameter_size_bytes",
)

clock = time.perf_counter


class StragglerRank(RuntimeCheck):
    """One rank is clearly slower than the others, and every other rank waits for it.

    ## Why it matters

    DDP all-reduces the gradients inside `backward()`, so every step ends at the pace of the slowest
    rank: a rank that spends 80 ms more per step makes every rank's step 80 ms longer, and the
    others spend that time waiting inside the reduction. ddpcheck times each rank's steps from
    hooks (waiting for the DataLoader, DDP's forward, `backward()` with the reduction, the
    optimizer step, the script's own collectives, and the rest) and compares each rank's own
    phases, leaving out the phases where ranks wait for each other, with the median of the other
    ranks. A rank whose excess is at least 20 % of the others' median step (and 5 ms), and that
    is the slowest in at least two thirds of the steps (a busy machine slows some rank in some
    steps; a straggler is slow step after step), is reported with the phase it comes from. Ranks
    without a process group (DDP108) never wait for each other, so their speeds are not compared.

    ## How to fix

    Look at what that rank does differently in the named phase: `other` is code in your loop that
    runs on that rank only (rank-0 logging, evaluation or checkpoint writing each step: do it every
    N steps or outside the step); `data` is a slower input pipeline for that rank's shard; `forward`
    or `backward` point at its device (another process on it, throttling) or larger inputs.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP140"
    hint = "see what that rank does in the named phase that the others do not"
    name = "straggler-rank"
    severity = Severity.WARNING
    INVALID = ("""
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0:
                writer.add_histogram("weights", flat_weights(model), step)  # every step, rank 0 only
    """,)
    VALID = ("""
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0 and step % 500 == 0:
                writer.add_histogram("weights", flat_weights(model), step)
    """,)


class DataBound(RuntimeCheck):
    """The ranks spend a large share of every step waiting for the DataLoader.

    ## Why it matters

    Time a rank spends in `next(iter(loader))` is time its device sits idle; adding ranks does not
    help when each of them waits for its input pipeline. ddpcheck measures the wait for each batch
    (`DataLoader.__next__`) on every rank and reports it when it takes 40 % of the median step or
    more, and at least 5 ms (over at least 10 timed steps), with the loader's settings.

    ## How to fix

    Give the DataLoader more worker processes (`num_workers`), keep them alive between epochs
    (`persistent_workers=True`) and let them run ahead (`prefetch_factor`); on a GPU also
    `pin_memory=True` with `.to(device, non_blocking=True)`. Move decoding and augmentation that
    need not happen per step into preprocessing.

    ## References

    - https://pytorch.org/docs/stable/data.html#multi-process-data-loading
    - https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html
    """

    code = "DDP141"
    hint = "more DataLoader workers, persistent_workers=True, prefetch_factor; pin_memory on a GPU"
    name = "data-bound"
    severity = Severity.INFO
    INVALID = ("""
        loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images))
    """,)
    VALID = ("""
        loader = DataLoader(images, batch_size=64, sampler=DistributedSampler(images),
                            num_workers=8, persistent_workers=True, prefetch_factor=4,
                            pin_memory=True)
    """,)


class CommunicationBound(RuntimeCheck):
    """A large share of every step is DDP's gradient reduction that backward does not hide.

    ## Why it matters

    DDP overlaps the all-reduce of each gradient bucket with the rest of backward. What is left
    after the last gradient is computed is pure waiting. ddpcheck reads DDP's own timers
    (`_get_ddp_logging_data()`: the reduction's time and its overlap with backward compute, sampled
    by DDP) and reports the exposed part when it is 40 % of the median step or more (and 5 ms)
    and no straggler explains it. Models with under 4 MiB of gradients (about a million float32
    parameters) are left out: their reduction is bound by latency, which bucket sizes and
    compression cannot change, and on a shared CPU its time is mostly waiting for a busy peer.

    ## How to fix

    Make fewer, larger all-reduces: a larger `bucket_cap_mb`; accumulate gradients over several
    micro-batches with `no_sync()` so the reduction runs once per optimizer step; a larger per-rank
    batch (more compute per byte sent). On a slow network a compression hook
    (`register_comm_hook` with `fp16_compress_hook` / `bf16_compress_hook`) halves the bytes.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/docs/stable/ddp_comm_hooks.html
    """

    code = "DDP142"
    hint = "larger bucket_cap_mb, no_sync() accumulation, or a larger per-rank batch"
    name = "communication-bound"
    severity = Severity.INFO
    INVALID = ("""
        model = DDP(model)
        for x, y in loader:  # a small model and batch: every step waits for the all-reduce
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    """,)
    VALID = ("""
        model = DDP(model, bucket_cap_mb=100)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accumulate == 0
            with contextlib.nullcontext() if last else model.no_sync():
                loss_fn(model(x), y).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    """,)


class UnscaledLearningRate(RuntimeCheck):
    """`--scaling`: the learning rate stayed the same while the global batch grew with the world size.

    ## Why it matters

    With a fixed per-rank batch, N ranks train on an N times larger global batch and make N times
    fewer optimizer steps per epoch. Keeping the learning rate of the one-rank run usually trains
    slower and worse; the linear scaling rule (Goyal et al. 2017) multiplies the learning rate by
    the growth of the global batch, with a warm-up (Adam-type optimizers often use the square
    root instead). `ddpcheck run --scaling 1,2,4` runs the script at each world size and reads the
    learning rate each run's optimizer actually used (the largest value of its first param group,
    so a warm-up does not hide it) and the global batch (the samples the loaders yielded per
    optimizer step, all ranks), and reports a learning rate that did not move with the factor it
    should have grown by.

    ## How to fix

    Scale it with the global batch: `lr = base_lr * global_batch / base_batch` (usually
    `base_lr * world_size` with a fixed per-rank batch), with a few epochs of warm-up; or keep the
    global batch fixed by dividing the per-rank batch by the world size.

    ## References

    - https://arxiv.org/abs/1706.02677
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP143"
    hint = "scale the learning rate with the global batch (lr × world_size), with a warm-up"
    name = "learning-rate-ignores-world-size"
    severity = Severity.WARNING
    INVALID = ("""
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # the one-GPU value at any world size
    """,)
    VALID = ("""
        world_size = dist.get_world_size()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * world_size)
    """,)


class Timer:
    """The running step window of one rank and the rows it has kept. Plain Python, no torch."""

    def __init__(self, section: dict[str, Any]) -> None:
        self.section = section
        self.acc = [0.0] * len(COLUMNS)
        self.active: str | None = None  # the phase being timed (phases never nest)
        self.boundary: float | None = None  # end of the previous step (after ddpcheck's hooks)
        self.first_boundary: float | None = None
        self.samples = 0  # since the start
        self.samples_at_first = 0
        self.boundaries = 0
        self.ours_total = 0.0  # ddpcheck's own time inside the window since the first step
        self.closed_at = 0.0
        self.stride = 1  # keep every stride-th step once MAX_ROWS is reached
        self.pending: list[tuple[list[float], list[tuple[int, Any, Any]]]] = []  # CUDA events to resolve

    def add(self, phase: str, seconds: float) -> None:
        self.acc[PHASE_INDEX[phase]] += seconds

    def close_step(self, step: int, now: float, checked: bool,
                   events: list[tuple[int, Any, Any]] | None = None) -> None:
        """An optimizer step of the leading optimizer ended at `now` (before ddpcheck's post-hooks)."""
        self.boundaries += 1
        if self.boundary is not None:
            row = self.acc
            row[0] = step
            row[1] = now - self.boundary
            row[PHASE_INDEX["samples"]] = self.samples - self._samples_at_boundary
            row[PHASE_INDEX["checked"]] = 1 if checked else 0
            if step % self.stride == 0:
                if events:
                    self.pending.append((row, events))
                else:
                    self._keep(row)
            self.ours_total += self.acc[PHASE_INDEX["ours"]]
        else:
            self.first_boundary = now
            self.samples_at_first = self.samples
        self.acc = [0.0] * len(COLUMNS)
        self._samples_at_boundary = self.samples
        self.closed_at = now
        self.section["window"] = [
            round(now - (self.first_boundary or now) - self.ours_total, 6), self.samples - self.samples_at_first,
            self.boundaries - 1,
        ]
        self.section["samples"] = self.samples

    _samples_at_boundary = 0

    def resume(self, now: float) -> None:
        """ddpcheck's own post-step work is over: the next step's window starts here."""
        self.boundary = now
        self.ours_total += now - self.closed_at

    def _keep(self, row: list[float]) -> None:
        rows = self.section["steps"]
        rows.append([int(row[0]), *(int(round(v * 1e6)) for v in row[1:7]), int(row[7]),
                     int(round(row[8] * 1e6)), int(row[9])])
        if len(rows) >= MAX_ROWS:
            del rows[1::2]
            self.stride *= 2
            self.section["stride"] = self.stride

    def resolve(self, force: bool = False) -> None:
        """Fill in the CUDA-timed phases of rows whose events have completed (all of them when
        forced, or when too many are waiting: then the oldest are synchronised)."""
        still = []
        force_first = max(0, len(self.pending) - MAX_PENDING)
        for n, (row, events) in enumerate(self.pending):
            sync = force or n < force_first
            if not sync and not all(end.query() for _, _, end in events):
                still.append((row, events))
                continue
            for index in {index for index, _, _ in events}:
                row[index] = 0.0  # the wall-clock value is replaced by the GPU's
            for index, start, end in events:
                if sync:
                    end.synchronize()
                row[index] += start.elapsed_time(end) / 1e3
            self._keep(row)
        self.pending = still


def _batch_size(batch: Any, depth: int = 0) -> int:
    """The leading dimension of the first tensor in a batch (tuple, list, dict, or a tensor)."""
    shape = getattr(batch, "shape", None)
    if shape is not None and hasattr(batch, "dim"):
        return int(shape[0]) if len(shape) else 1
    if depth > 3:
        return 0
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = _batch_size(item, depth + 1)
            if n:
                return n
    return 0


def capture(session: "Session") -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch.optim import optimizer as optim_mod
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    section = session.section(PROBE_NAME)
    section.update(clock="wall", device=None, columns=list(COLUMNS), steps=[], stride=1,
                   window=[0.0, 0, 0], samples=0, loaders=[], optimizers=[], ddp=None)
    timer = Timer(section)
    state: dict[str, Any] = {"lead": None, "cuda": False, "events": [], "opt_start": None,
                             "pre_begin": None, "ours": 0.0, "loaders": set()}
    optimizers: dict[int, dict[str, Any]] = {}

    def enter(phase: str) -> float | None:
        if timer.active is not None:
            return None
        timer.active = phase
        return clock()

    def leave(phase: str, start: float | None) -> None:
        if start is None:
            return
        timer.active = None
        timer.add(phase, clock() - start)

    # --- data ---------------------------------------------------------------------------------
    original_next = _BaseDataLoaderIter.__next__

    def __next__(self: Any) -> Any:
        start = enter("data")
        try:
            batch = original_next(self)
        finally:
            leave("data", start)
        timer.samples += _batch_size(batch)
        if id(self) not in state["loaders"]:
            state["loaders"].add(id(self))
            _note_loader(section, self)
        return batch

    setattr(_BaseDataLoaderIter, "__next__", __next__)

    # --- forward and backward: the session's shared phase hooks ------------------------------------
    # phase -> the starts of its open calls (a clock reading or a CUDA event; None: not timed,
    # as it began inside another timed phase, which counts it)
    started: dict[str, list[Any]] = {"forward": [], "backward": []}

    def on_phase(phase: str, begin: bool) -> None:
        opened = started.get(phase)
        if opened is None:
            return  # data: timed with its batch above; the optimizer step: by the step hooks below
        if begin:
            if timer.active is not None:
                opened.append(None)
                return
            timer.active = phase
            opened.append(_cuda_begin() if state["cuda"] else clock())
            return
        start = opened.pop() if opened else None
        if start is None:
            return
        timer.active = None
        if state["cuda"]:
            state["events"].append(_cuda_end(start, phase))
        else:
            timer.add(phase, clock() - start)

    session.on_phase.append(on_phase)

    def on_ddp_init(ddp: DistributedDataParallel) -> None:
        first = next((p for p in ddp.module.parameters()), None)
        if first is not None and section["device"] is None:
            section["device"] = str(first.device)
            state["cuda"] = first.device.type == "cuda" and _timing_events_work()
            section["clock"] = "cuda" if state["cuda"] else "wall"

    session.on_ddp_init.append(on_ddp_init)

    # --- collectives the script calls itself -----------------------------------------------------
    for name in _COLLECTIVES:
        for module in (dist, c10d):
            fn = getattr(module, name, None)
            if fn is not None and not getattr(fn, "_ddpcheck_timed", False):
                setattr(module, name, _timed_collective(fn, session, enter, leave))

    # --- the optimizer step: four global hooks around everyone else's ---------------------------
    def pre_first(opt: Any, args: Any, kwargs: Any) -> None:
        state["pre_begin"] = clock()

    def pre_last(opt: Any, args: Any, kwargs: Any) -> None:
        now = clock()
        if state["pre_begin"] is not None:
            state["ours"] += now - state["pre_begin"]
        if state["cuda"] and timer.active is None:
            state["opt_event"] = _cuda_begin()
        state["opt_start"] = now
        timer.active = "optimizer"

    def post_first(opt: Any, args: Any, kwargs: Any) -> None:
        now = clock()
        timer.active = None
        if state.get("opt_event") is not None:
            state["events"].append(_cuda_end(state.pop("opt_event"), "optimizer"))
        elif state["opt_start"] is not None:
            timer.add("optimizer", now - state["opt_start"])
        state["opt_start"] = None
        _note_lr(optimizers, section, opt)
        if state["lead"] is None:
            state["lead"] = id(opt)
        if id(opt) != state["lead"]:
            return
        step = session.step + 1  # the session counts this step in its own post-hook, after us
        timer.add("ours", state["ours"])
        state["ours"] = 0.0
        timer.close_step(step, now, session.is_checked(step), state["events"] or None)
        state["events"] = []
        state["post_end_pending"] = True
        if timer.pending:
            timer.resolve()

    def post_last(opt: Any, args: Any, kwargs: Any) -> None:
        if state.pop("post_end_pending", False):
            timer.resume(clock())  # ddpcheck's post-step work is in no step's window
        if session.is_checked(session.step) and session.step >= 10:
            _read_ddp_logging(session, section)

    # torch keeps the global hooks in OrderedDicts and calls them in order: ours go first and last.
    pre_hooks: Any = optim_mod._global_optimizer_pre_hooks
    post_hooks: Any = optim_mod._global_optimizer_post_hooks
    pre_hooks.move_to_end(optim_mod.register_optimizer_step_pre_hook(pre_first).id, last=False)
    optim_mod.register_optimizer_step_pre_hook(pre_last)
    post_hooks.move_to_end(optim_mod.register_optimizer_step_post_hook(post_first).id, last=False)
    optim_mod.register_optimizer_step_post_hook(post_last)

    def at_end(why: str) -> None:
        if timer.pending:
            try:
                timer.resolve(force=True)
            except Exception:  # noqa: BLE001 - a broken CUDA context must not lose the rest
                timer.pending = []
        _read_ddp_logging(session, section)

    session.at_end.append(at_end)



_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "reduce",
    "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object", "scatter",
    "scatter_object_list",
)  # fmt: skip


def _timed_collective(fn: Callable[..., Any], session: "Session",
                      enter: Callable[[str], float | None],
                      leave: Callable[[str, float | None], None]) -> Callable[..., Any]:
    import functools

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        group = kwargs.get("group")
        if group is not None and group is session.group:  # ddpcheck's own traffic
            return fn(*args, **kwargs)
        start = enter("collectives")
        try:
            return fn(*args, **kwargs)
        finally:
            leave("collectives", start)

    setattr(collective, "_ddpcheck_timed", True)
    return collective


def _timing_events_work() -> bool:
    """Real CUDA with timing events (an emulated CUDA on the CPU has none)."""
    try:
        cuda = _cuda()
        cuda.Event(enable_timing=True)
        return bool(cuda.is_initialized() or cuda.device_count() > 0)
    except Exception:  # noqa: BLE001
        return False


def _cuda() -> Any:
    import torch

    return torch.cuda


def _cuda_begin() -> Any:
    event = _cuda().Event(enable_timing=True)
    event.record()
    return event


def _cuda_end(begin: Any, phase: str) -> tuple[int, Any, Any]:
    end = _cuda().Event(enable_timing=True)
    end.record()
    return (PHASE_INDEX[phase], begin, end)


def _note_loader(section: dict[str, Any], it: Any) -> None:
    if len(section["loaders"]) >= 16:
        return
    batch_sampler = getattr(it, "_index_sampler", None)
    section["loaders"].append({
        "num_workers": getattr(it, "_num_workers", 0),
        "pin_memory": bool(getattr(it, "_pin_memory", False)),
        "prefetch_factor": getattr(it, "_prefetch_factor", None),
        "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
        "batch_size": getattr(batch_sampler, "batch_size", None),
    })


def _note_lr(optimizers: dict[int, dict[str, Any]], section: dict[str, Any], opt: Any) -> None:
    try:
        lr = float(opt.param_groups[0]["lr"])
    except (KeyError, IndexError, TypeError, ValueError):
        return
    entry = optimizers.get(id(opt))
    if entry is None:
        if len(optimizers) >= 8:
            return
        entry = {"class": type(opt).__name__, "groups": len(opt.param_groups), "first": lr,
                 "max": lr, "last": lr, "steps": 0}
        optimizers[id(opt)] = entry
        section["optimizers"].append(entry)
    entry["last"] = lr
    entry["max"] = max(entry["max"], lr)
    entry["steps"] += 1


def _read_ddp_logging(session: "Session", section: dict[str, Any]) -> None:
    for ddp in session.ddps():
        try:
            read: Callable[[], dict[str, Any]] = ddp._get_ddp_logging_data  # unannotated in torch
            data = read()
        except Exception:  # noqa: BLE001 - private API: absent or changed in other releases
            return
        section["ddp"] = {k: data[k] for k in DDP_LOG_KEYS if k in data}
        return


# --- in the launcher --------------------------------------------------------------------------

STRAGGLER, DATA, COMM, UNSCALED_LR = StragglerRank.code, DataBound.code, CommunicationBound.code, UnscaledLearningRate.code
FINDING_MIN_STEPS = 10  # timed steps per rank (after the warm-up) before a performance finding


def judge(records: list[dict[str, Any]], ctx: Context | None) -> list[Verdict]:
    from ddpcheck.run import performance

    lr = Verdict(UNSCALED_LR, SKIP, "compares runs at several world sizes: `--scaling 1,2,4`")
    perf = performance.summarise(records)
    if perf is None:
        return [Verdict(c, SKIP, "no optimizer step was timed") for c in (STRAGGLER, DATA, COMM)] + [lr]
    steps = perf["timed_steps"]
    if perf.get("emulated"):
        why = "CUDA was emulated on the CPU: these are the CPU's timings, not the GPU job's"
        return [Verdict(c, SKIP, why) for c in (STRAGGLER, DATA, COMM)] + [lr]
    if steps < FINDING_MIN_STEPS:
        why = f"{steps} timed steps per rank; {FINDING_MIN_STEPS} needed to judge"
        return [Verdict(c, SKIP, why) for c in (STRAGGLER, DATA, COMM)] + [lr]
    hints = {h["kind"]: h["text"] for h in perf["hints"]}
    median = performance.fmt_ms(perf["step_median"])
    out = []
    s = perf.get("straggler")
    if s:
        out.append(Verdict(STRAGGLER, FAIL, f"rank {s['rank']}: +{performance.fmt_ms(s['excess_s'])} per "
                           f"step in {s['phase']}", message=hints["straggler"], ranks=(s["rank"],),
                           details={"straggler": s}))
    elif len(perf["ranks"]) < 2:
        out.append(Verdict(STRAGGLER, SKIP, "one rank"))
    else:
        out.append(Verdict(STRAGGLER, PASS, f"ranks within {performance.STRAGGLER_SHARE:.0%} of each "
                           f"other (median step {median})"))
    share = perf["shares"]["data"]
    if "data" in hints:
        out.append(Verdict(DATA, FAIL, f"{share:.0%} of a {median} step waiting for data",
                           message=f"The ranks spend {share:.0%} of each step (median {median}) waiting for "
                           f"the DataLoader. {hints['data']}", details={"share": share}))
    else:
        out.append(Verdict(DATA, PASS, f"{share:.0%} of a step waiting for data"))
    ddp = perf.get("ddp")
    if "communication" in hints and ddp:
        out.append(Verdict(COMM, FAIL, f"{performance.fmt_ms(ddp['exposed_comm_s'])} of a {median} step "
                           "in the reduction, not hidden", message=hints["communication"],
                           details={"ddp": ddp}))
    elif ddp:
        out.append(Verdict(COMM, PASS, f"{performance.fmt_ms(ddp['exposed_comm_s'])} of a {median} step "
                           "in the reduction, not hidden"))
    else:
        out.append(Verdict(COMM, SKIP, "DDP's timers were not available"))
    return out + [lr]


PROBE = Probe(PROBE_NAME, (StragglerRank, DataBound, CommunicationBound, UnscaledLearningRate), judge, capture, order=1000)
