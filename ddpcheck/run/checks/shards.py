"""Which dataset indices each rank draws, per DataLoader epoch: overlap across ranks, coverage,
and the missing DistributedSampler.

Captured where the loader's iterator takes the next index from its sampler
(`_BaseDataLoaderIter._next_index`), so worker prefetching and persistent workers lose nothing
(wrapping `DataLoader.__iter__` loses the first prefetch_factor × num_workers batches). A new
`_sampler_iter` object marks a new pass. DistributedSampler's padding — `(-len(dataset)) %
world_size` repeated indices when drop_last is False — is told apart from real overlap.

Only training passes are judged here: the passes during which the rank took an optimizer step
(counted from the pass's first batch to its last). A peek at one batch (`next(iter(loader))` to
print the batch size), a warm-up batch or an evaluation pass over the training set takes none;
evaluation loaders are judged by evaluation.py. Shared indices are not shared data when each rank
makes its own: before saying that the ranks train on the same data, the samples the same index
gave on each rank and the data each rank's dataset keeps are compared (_samples.py).
"""

from __future__ import annotations

from types import FrameType
from typing import TYPE_CHECKING, Any

import base64
import os
import sys
import time
import weakref
import zlib
from array import array
from dataclasses import replace

from ddpcheck.run.records import Record, node_of
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session


class MissingDistributedSampler(RuntimeCheck):
    """Every rank reads the same samples because the DataLoader has no DistributedSampler.

    ## Why it matters

    Each DDP rank runs its own DataLoader. Without a `DistributedSampler` every rank draws from
    the whole dataset, so N ranks train N times on the same data: the job is no faster than one
    process and an "epoch" is N epochs. ddpcheck records the indices each rank's loader takes from
    its sampler and finds them shared across ranks.

    Not a finding: scripts that load the whole global batch on every rank and keep their own
    slice of it before the model (recommendation models such as DLRM do, to pair data-parallel
    layers with model-parallel embeddings). When each rank's DDP model gets exactly 1/N of the
    rows each rank loads, the check passes and says so.

    ## How to fix

    Pass `sampler=DistributedSampler(dataset)` to the DataLoader (and drop `shuffle=True`; the
    sampler shuffles), and call `sampler.set_epoch(epoch)` every epoch.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP100"
    name = "ranks-draw-same-samples"
    severity = Severity.ERROR
    explains = ("DDP104",)
    BAD = """
        loader = DataLoader(dataset, batch_size=32, shuffle=True)
        model = DDP(model)
        for x, y in loader:
            ...
    """
    GOOD = """
        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        model = DDP(model)
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """


class OverlappingShards(RuntimeCheck):
    """Ranks draw the same dataset indices although a DistributedSampler is used.

    ## Why it matters

    A `DistributedSampler` built with the wrong `num_replicas` or `rank` (hard-coded, or taken
    from `LOCAL_RANK` on several nodes) gives several ranks the same shard: those samples count
    twice per epoch and others never appear. DistributedSampler's own padding (it repeats
    `(-len(dataset)) % world_size` indices when `drop_last=False`) is expected and not reported.

    ## How to fix

    Build the sampler with the defaults, which read the process group, or with
    `num_replicas=dist.get_world_size(), rank=dist.get_rank()`.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP101"
    name = "overlapping-shards"
    severity = Severity.ERROR
    explains = ("DDP104",)
    BAD = """
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    """
    GOOD = """
        sampler = DistributedSampler(dataset)  # world size and rank from the process group
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    """


class ShardCoverageGap(RuntimeCheck):
    """A complete epoch left samples that no rank drew.

    ## Why it matters

    When every rank finished an epoch, the union of their indices should cover the dataset, up
    to what `drop_last` drops. Missing samples mean the shards do not add up (a sampler split for
    more ranks than run), so part of the data is never trained on.

    ## How to fix

    Give the sampler the real world size (`DistributedSampler(dataset)` reads it from the process
    group); check custom samplers split `len(dataset)` over `get_world_size()` ranks.

    ## References

    - https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler
    """

    code = "DDP102"
    name = "shard-coverage-gap"
    severity = Severity.WARNING
    BAD = """
        sampler = DistributedSampler(dataset, num_replicas=8, rank=dist.get_rank())  # 4 ranks run
    """
    GOOD = """
        sampler = DistributedSampler(dataset)
    """


NAME = "shards"
NO_SAMPLER, OVERLAP, COVERAGE = MissingDistributedSampler.code, OverlappingShards.code, ShardCoverageGap.code
FULL_EPOCHS = 3  # epochs per loader whose every index is kept; later ones keep a digest only
FULL_EPOCHS_PER_RANK = 12  # ... and over all loaders of a rank (scripts that build one per epoch)
HEAD = 64  # indices kept from the start of every epoch (for the set_epoch comparison)
KEPT_BATCHES = 32  # checked steps whose first batch a loader without indices fingerprints
SAMPLES = 64  # indices per kept pass whose samples are fingerprinted (see _samples.py)

_OURS = (os.sep + "torch" + os.sep, os.sep + "ddpcheck" + os.sep + "run" + os.sep, "<frozen ")


def encode(values: array[int]) -> str:
    return base64.b64encode(zlib.compress(values.tobytes(), 1)).decode("ascii")


def decode(text: str) -> array[int]:
    out = array("q")
    out.frombytes(zlib.decompress(base64.b64decode(text)))
    return out


def _user_frame() -> FrameType | None:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and any(p in frame.f_code.co_filename for p in _OURS):
        frame = frame.f_back
    return frame


def assigned_name(path: str, line: int) -> str | None:
    """The name a statement at `path:line` assigns the value of a call on that line to, as the
    code writes it (`train_loader`, `self.loader`); None for anything else."""
    import ast

    tree = _parsed(path)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            value = node.value
            if not isinstance(value, ast.Call) or value.lineno != line:
                return None
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) == 1 and isinstance(targets[0], (ast.Name, ast.Attribute)):
                return ast.unparse(targets[0])
            return None
    return None


_TREES: dict[str, Any] = {}


def _parsed(path: str) -> Any:
    import ast

    if path not in _TREES:
        try:
            with open(path, encoding="utf-8") as fh:
                _TREES[path] = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            _TREES[path] = None
    return _TREES[path]


class _Epoch:
    def __init__(self, record: dict[str, Any], keep: bool) -> None:
        self.record, self.keep = record, keep
        self.values = array("q")
        self.crc = 0

    def add(self, indices: Any) -> None:
        chunk = array("q", indices)
        self.crc = zlib.crc32(chunk.tobytes(), self.crc)
        if self.keep:
            self.values.extend(chunk)
        elif len(self.record["head"]) < HEAD:
            self.record["head"].extend(chunk[: HEAD - len(self.record["head"])])
        self.record["count"] += len(chunk)

    def sync(self) -> None:
        """Bring the JSON record up to date (done at epoch ends, at exit, and now and then)."""
        self.record["crc"] = self.crc
        if self.keep:
            self.record["head"] = list(self.values[:HEAD])
            self.record["indices"] = encode(self.values)


def _weak(obj: Any) -> weakref.ref[Any] | None:
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def capture(session: Session) -> None:
    """Install the index capture once (both `shards` and `set-epoch` need it)."""
    if not session.once("dataloader-indices"):
        return
    import torch.utils.data.dataloader as dl
    from torch.utils.data import DistributedSampler, IterableDataset

    section = session.section(NAME)
    section["loaders"] = []
    loaders: dict[int, dict[str, Any]] = {}  # id(loader) -> runtime state
    last_sync = [time.monotonic()]
    kept = [0]  # epochs with every index kept, over all loaders

    original_init = dl.DataLoader.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        frame = _user_frame()
        info: dict[str, Any] = {"index": len(section["loaders"]), "name": None,
                "site": f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame else None,
                "path": frame.f_code.co_filename if frame else None, "line": frame.f_lineno if frame else None,
                "epochs": []}
        if frame is not None:
            info["name"] = assigned_name(frame.f_code.co_filename, frame.f_lineno)
        try:
            dataset = self.dataset
            info["iterable"] = isinstance(dataset, IterableDataset)
            info["dataset_len"] = None if info["iterable"] else len(dataset)
        except TypeError:
            info["dataset_len"] = None
        sampler = getattr(self, "sampler", None)
        info["sampler"] = type(sampler).__name__
        info["distributed"] = isinstance(sampler, DistributedSampler)
        if isinstance(sampler, DistributedSampler):
            info.update(shuffle=bool(sampler.shuffle), sampler_drop_last=bool(sampler.drop_last),
                        num_replicas=int(sampler.num_replicas), sampler_rank=int(sampler.rank))
        info["batch_size"] = self.batch_size
        info["drop_last"] = bool(self.drop_last)
        section["loaders"].append(info)
        # Weak references: a script that builds a loader per epoch must not keep every dataset
        # alive. Iterators hold their loader's state themselves (they do not hold the loader).
        loaders[id(self)] = {"info": info, "sampler_iter": None, "epoch": None,
                             "loader": weakref.ref(self), "sampler": _weak(sampler)}

    original_iter_init = dl._BaseDataLoaderIter.__init__

    def iter_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        self._ddpcheck_state = loaders.get(id(loader))
        original_iter_init(self, loader, *args, **kwargs)

    original_next = dl._BaseDataLoaderIter.__next__

    def __next__(self: Any) -> Any:
        batch = original_next(self)
        state = getattr(self, "_ddpcheck_state", None)
        if state is not None:
            if state["info"].get("iterable"):
                _name(state)
                _fingerprint_batch(state, batch)
            elif "rows" not in state["info"]:
                state["info"]["rows"] = leading_rows(batch)
            pending = getattr(self, "_ddpcheck_samples", None)
            if pending:
                record, indices = pending.pop(0)
                _fingerprint_samples(record, indices, batch)
        return batch

    def _fingerprint_samples(record: dict[str, Any], indices: list[int], batch: Any) -> None:
        """The sample each index gave (the batch's rows), for the first SAMPLES indices of a pass."""
        from ddpcheck.run.checks._samples import row_digests
        from ddpcheck.run.rank.fingerprint import structure_digest

        if record.get("batched", True):
            digests = row_digests(batch, len(indices))
        else:  # no automatic batching: the batch is the sample
            one = structure_digest(batch)
            digests = None if one is None else [one]
        if digests is None:
            return
        samples = record["samples"]
        for index, digest in zip(indices, digests):
            if len(samples) >= SAMPLES:
                break
            samples.setdefault(str(index), digest)

    def _fingerprint_batch(state: dict[str, Any], batch: Any) -> None:
        """A loader without indices (IterableDataset): fingerprint its first batch before each
        checked step instead, for the identical-inputs check."""
        from ddpcheck.run.rank.fingerprint import structure_digest

        step = session.step + 1
        if state.get("batch_window") == step or step != session.next_checked:
            return
        state["batch_window"] = step
        batches = state["info"].setdefault("batches", [])
        if len(batches) < KEPT_BATCHES:
            digest = structure_digest(batch)
            if digest is not None:
                batches.append([step, digest])

    original_next_index: Any = dl._BaseDataLoaderIter._next_index

    def _next_index(self: Any) -> Any:
        state = getattr(self, "_ddpcheck_state", None)
        if state is None or state["info"].get("iterable"):
            return original_next_index(self)
        if self._sampler_iter is not state["sampler_iter"]:
            _new_epoch(state, self)
        epoch = state["epoch"]
        record = epoch.record
        try:
            index = original_next_index(self)
        except StopIteration:
            record["complete"] = True
            record["steps"] = session.step - record["step"]
            epoch.sync()
            raise
        record["steps"] = session.step - record["step"]
        indices = index if isinstance(index, (list, tuple)) else [index]
        try:
            epoch.add(indices)
        except (TypeError, ValueError, OverflowError):
            state["info"]["opaque"] = True
            return index
        if record.get("samples") is not None and len(record["samples"]) < SAMPLES and \
                getattr(self, "_in_order", True):
            record["batched"] = isinstance(index, (list, tuple))
            pending = self.__dict__.setdefault("_ddpcheck_samples", [])
            if len(pending) < 64:
                pending.append((record, list(indices)))
        return index

    def _name(state: dict[str, Any]) -> None:
        """The user's variable for the loader, from the frame that iterates it (once)."""
        info = state["info"]
        if info["name"] is None and not state.get("named"):
            state["named"] = True
            frame = _user_frame()
            loader = state["loader"]()
            if frame is not None and loader is not None:
                info["name"] = next((k for k, v in frame.f_locals.items() if v is loader), None)

    def _new_epoch(state: dict[str, Any], it: Any) -> None:
        if state["epoch"] is not None:
            state["epoch"].sync()
        _name(state)
        sampler = state["sampler"]() if state["sampler"] is not None else None
        info = state["info"]
        # Passes that took no optimizer step (a peek, an evaluation pass) do not use up the
        # passes whose every index is kept, up to twice as many in all.
        training = sum(1 for e in info["epochs"] if e.get("kept") and e.get("steps"))
        with_indices = sum(1 for e in info["epochs"] if e.get("kept"))
        keep = training < FULL_EPOCHS and with_indices < 2 * FULL_EPOCHS and kept[0] < 2 * FULL_EPOCHS_PER_RANK
        if keep and "stored" not in info:
            from ddpcheck.run.checks._samples import stored_content

            dataset = getattr(it, "_dataset", None)
            info["stored"] = stored_content(dataset) if dataset is not None else []
        record: dict[str, Any] = {"sampler_epoch": getattr(sampler, "epoch", None), "count": 0, "complete": False,
                  "head": [], "crc": 0, "indices": None, "step": session.step, "steps": 0, "kept": keep,
                  "samples": {} if keep else None}
        info["epochs"].append(record)
        kept[0] += keep
        state["epoch"] = _Epoch(record, keep=keep)
        state["sampler_iter"] = it._sampler_iter
        session.flush()

    def after_step(optimizer: Optimizer, step: int) -> None:
        if time.monotonic() - last_sync[0] > 5.0:
            last_sync[0] = time.monotonic()
            for state in loaders.values():
                if state["epoch"] is not None:
                    state["epoch"].sync()

    def at_end(why: str) -> None:
        for state in loaders.values():
            if state["epoch"] is not None:
                state["epoch"].sync()

    setattr(dl.DataLoader, "__init__", __init__)
    setattr(dl._BaseDataLoaderIter, "__init__", iter_init)
    setattr(dl._BaseDataLoaderIter, "_next_index", _next_index)
    setattr(dl._BaseDataLoaderIter, "__next__", __next__)
    session.after_step.append(after_step)
    session.at_end.append(at_end)


# --- judgement (torch-free) ----------------------------------------------------------------------

def loaders_by_index(records: list[Record]) -> dict[int, dict[int, dict[str, Any]]]:
    """loader index -> {rank: loader info}, for loaders every reporting rank made."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for r in records:
        for info in r.get("probes", {}).get(NAME, {}).get("loaders", []):
            out.setdefault(info["index"], {})[r["rank"]] = info
    return out


def loader_label(info: dict[str, Any]) -> str:
    name = f"'{info['name']}'" if info.get("name") else f"#{info['index'] + 1}"
    return f"DataLoader {name}" + (f" (made at {info['site']})" if info.get("site") else "")


def loader_place(info: dict[str, Any]) -> dict[str, Any]:
    """The `path`/`line` of a Verdict about this loader: where the user's code made it."""
    line = info.get("line")
    return {"path": info.get("path"), "line": int(line) if isinstance(line, int) else None}


def is_training(epoch: dict[str, Any]) -> bool:
    """A pass during which the rank took an optimizer step (records without the count: every pass)."""
    return bool(epoch.get("steps", 1))


def training_passes(per_rank: dict[int, dict[str, Any]]) -> list[int]:
    """Positions of the passes that are training passes on every rank (the same positions)."""
    n = min(len(i["epochs"]) for i in per_rank.values())
    return [e for e in range(n) if all(is_training(i["epochs"][e]) for i in per_rank.values())]


def leading_rows(value: object) -> int | None:
    """The first dimension of the first tensor in a batch or a call's arguments (its sample count)."""
    import torch

    stack = [value]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            if item.dim() >= 1:
                return int(item.shape[0])
        elif isinstance(item, dict):
            stack[:0] = list(item.values())
        elif isinstance(item, (list, tuple)):
            stack[:0] = list(item)
    return None


def kept_slice(records: list[Record], per_rank: dict[int, dict[str, Any]], world: int) -> tuple[int, int] | None:
    """(rows each rank's DDP model gets, rows each rank loads) when every rank keeps exactly 1/world
    of every batch it loads: the script splits the global batch itself (DLRM does), so a loader
    without a DistributedSampler is how it is meant to work."""
    fed = {r["rank"]: r.get("probes", {}).get("inputs", {}).get("rows") for r in records}
    found: set[tuple[int, int]] = set()
    for rank, info in per_rank.items():
        loaded, kept = info.get("rows"), fed.get(rank)
        if not loaded or not kept or kept * world != loaded:
            return None
        found.add((kept, loaded))
    return found.pop() if len(found) == 1 else None


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    results: dict[str, list[Verdict]] = {NO_SAMPLER: [], OVERLAP: [], COVERAGE: []}
    checked = evaluated = 0
    for index, per_rank in sorted(loaders_by_index(records).items()):
        if len(per_rank) < 2 or len(per_rank) < ctx.world_size:
            continue
        first = per_rank[min(per_rank)]
        if first.get("iterable") or first.get("opaque"):
            continue
        training = training_passes(per_rank)
        if not training:
            evaluated += 1  # evaluation passes only: evaluation.py judges them
            continue
        same_data = _same_data(per_rank, training)
        for epoch, e in enumerate(training):
            if not all(i["epochs"][e].get("indices") for i in per_rank.values()):
                continue
            checked += 1
            drawn = {r: decode(i["epochs"][e]["indices"]) for r, i in per_rank.items()}
            complete = all(i["epochs"][e]["complete"] for i in per_rank.values())
            for code, verdict in _judge_epoch(first, epoch, drawn, complete, ctx, same_data).items():
                split = (kept_slice(records, per_rank, len(per_rank))
                         if code == NO_SAMPLER and verdict.status == FAIL else None)
                if code == OVERLAP and verdict.status == FAIL:
                    verdict = _per_node(verdict, drawn, records)
                if split is not None:
                    verdict = Verdict(NO_SAMPLER, PASS, f"{loader_label(first)} has no DistributedSampler, but "
                                      f"each rank keeps 1/{len(per_rank)} of every batch it loads ({split[0]} of "
                                      f"{split[1]} rows reach the DDP model)")
                results[code].append(verdict)
    if not checked:
        why = ("no data loader pass reached an optimizer step (evaluation passes only)" if evaluated
               else "no DataLoader with indices on every rank")
        return [Verdict(c, SKIP, why) for c in results]
    out = []
    for code, verdicts in results.items():
        fails = [v for v in verdicts if v.status == FAIL]
        if fails:
            out.append(fails[0])
        elif verdicts:
            out.append(verdicts[0] if len(verdicts) == 1 else
                       replace(verdicts[0], detail=f"{verdicts[0].detail} (+{len(verdicts) - 1} more epochs)"))
        else:
            out.append(Verdict(code, SKIP, "nothing to check"))
    return out


def _per_node(verdict: Verdict, drawn: dict[int, "array[int]"], records: list[Record]) -> Verdict:
    """Overlap on a job of several nodes where each node drew the same shards as the first: the
    sampler was built per node (LOCAL_RANK / LOCAL_WORLD_SIZE); said with the nodes."""
    where = {r.get("rank", 0): (node_of(r), r.get("local_rank", 0)) for r in records}
    nodes = sorted({node for node, _ in where.values()})
    if len(nodes) < 2:
        return verdict
    by_local: dict[Any, list[int]] = {}
    for rank in drawn:
        by_local.setdefault(where.get(rank, (0, rank))[1], []).append(rank)
    twins = [sorted(ranks) for ranks in by_local.values() if len(ranks) > 1]
    if not twins or not all(len({tuple(sorted(set(drawn[r]))) for r in ranks}) == 1 for ranks in twins):
        return verdict
    shown = "; ".join(" and ".join(f"rank {r} (node {where[r][0]})" for r in ranks) for ranks in sorted(twins)[:3])
    said = (f" Every node drew the same shards ({shown}, the same LOCAL_RANK): the sampler was given the "
            "node's LOCAL_RANK / LOCAL_WORLD_SIZE; give it the global rank and world size.")
    return replace(verdict, message=(verdict.message or "") + said,
                   details={**verdict.details, "per_node": True, "nodes": nodes})


def _same_data(per_rank: dict[int, dict[str, Any]], passes: list[int]) -> str:
    """Whether the ranks' datasets give the same samples for the same index (_samples.py): SAME,
    PER_RANK, VARYING (random at every access, same stored data: augmentation), UNKNOWN, or
    "indices" (no evidence beyond the indices)."""
    from ddpcheck.run.checks import _samples

    by_samples = _samples.sample_verdict(per_rank, passes)
    if by_samples in (_samples.SAME, _samples.PER_RANK):
        return by_samples
    stored = _samples.stored_verdict(per_rank)
    if stored == _samples.PER_RANK:
        return stored
    if by_samples == _samples.VARYING:
        return _samples.VARYING if stored == _samples.SAME else _samples.UNKNOWN
    return _samples.SAME if stored == _samples.SAME else "indices"


def _judge_epoch(info: dict[str, Any], epoch: int, drawn: dict[int, array[int]], complete: bool,
                 ctx: Context, same_data: str = "indices") -> dict[str, Verdict]:
    label = loader_label(info)
    world = len(drawn)
    n = info.get("dataset_len")
    seen: dict[int, set[int]] = {}
    for rank, values in drawn.items():
        for v in set(values):
            seen.setdefault(v, set()).add(rank)
    total = sum(len(v) for v in drawn.values())
    distinct = len(seen)
    excess = total - distinct
    shared = sorted(v for v, ranks in seen.items() if len(ranks) > 1)
    share_ranks = tuple(sorted({r for v in shared for r in seen[v]}))
    example = ", ".join(map(str, shared[:5]))
    where = f"epoch {epoch}"
    out: dict[str, Verdict] = {}
    coverage = f"{distinct}/{n}" if n else f"{distinct}"
    place = loader_place(info)
    if not info.get("distributed"):
        if excess > 0 and same_data == "per-rank":
            out[NO_SAMPLER] = Verdict(NO_SAMPLER, PASS, f"{label} has no DistributedSampler and the ranks draw "
                                      "the same indices, but from their own data (the same index gives "
                                      "another sample on each rank)", epoch=epoch)
        elif excess > 0 and same_data == "unknown":
            out[NO_SAMPLER] = Verdict(NO_SAMPLER, SKIP, f"{label}: the ranks draw the same indices, but the "
                                      "samples differ across ranks and change at every access, and the dataset "
                                      "keeps no data ddpcheck can read: shared or per-rank data cannot be told "
                                      "apart", epoch=epoch)
        elif excess > 0:
            everything = all(len(set(v)) == distinct for v in drawn.values())
            what = ("every rank read the whole dataset" if everything
                    else f"{len(shared)} indices were read by more than one rank")
            varying = (" Their batches differ only by what is random at every access (augmentation): the "
                       "samples behind them are the same." if same_data == "varying" else "")
            out[NO_SAMPLER] = Verdict(
                NO_SAMPLER, FAIL, f"{label} uses {info['sampler']}: {what}",
                message=f"{label} has no DistributedSampler (it uses {info['sampler']}), so {what} "
                f"in training {where} ({total} samples drawn for {distinct} distinct; e.g. indices {example}). "
                f"The ranks train on the same data and the job is no faster than one process.{varying} Pass "
                "sampler=DistributedSampler(dataset) (and shuffle=False to the DataLoader).",
                ranks=share_ranks, epoch=epoch, **place,
                details={"loader": label, "drawn": total, "distinct": distinct, "examples": shared[:10],
                         "evidence": same_data})
        else:
            out[NO_SAMPLER] = Verdict(NO_SAMPLER, PASS, f"{label}: ranks draw disjoint indices "
                                      f"({info['sampler']})", epoch=epoch)
        return out
    out[NO_SAMPLER] = Verdict(NO_SAMPLER, PASS, f"{label} uses DistributedSampler")
    replicas = info.get("num_replicas") or world
    pad = (-n) % replicas if n and not info.get("sampler_drop_last") else 0
    if excess > pad:
        out[OVERLAP] = Verdict(
            OVERLAP, FAIL, f"{label}: {excess} indices drawn by more than one rank in {where}",
            message=f"{label}: {len(shared)} dataset indices were drawn by more than one rank in "
            f"{where} (ranks {','.join(map(str, share_ranks))}; e.g. {example}); DistributedSampler's "
            f"padding explains at most {pad}. The sampler's num_replicas/rank do not match the "
            f"launcher (sampler says num_replicas={info.get('num_replicas')}, "
            f"rank={info.get('sampler_rank')} on the first rank): build it with the defaults or "
            "with get_world_size()/get_rank().", ranks=share_ranks, epoch=epoch, **place,
            details={"loader": label, "overlap": len(shared), "padding": pad, "examples": shared[:10]})
    else:
        pad_note = f", {excess} padding repeats" if excess else ""
        out[OVERLAP] = Verdict(OVERLAP, PASS, f"{label}: disjoint shards, coverage {coverage}{pad_note}",
                               epoch=epoch, details={"padding": excess})
    if complete and n:
        allowed = (n % replicas if info.get("sampler_drop_last") else 0)
        if info.get("drop_last") and info.get("batch_size"):
            allowed += world * (info["batch_size"] - 1)
        missing = n - distinct
        if missing > allowed:
            out[COVERAGE] = Verdict(
                COVERAGE, FAIL, f"{label}: {missing} of {n} samples never drawn in {where}",
                message=f"{label}: {missing} of {n} samples were drawn by no rank in complete {where} "
                f"(drop_last explains at most {allowed}). Check the sampler's num_replicas.",
                epoch=epoch, severity="warning", **place, details={"loader": label, "missing": missing})
        else:
            out[COVERAGE] = Verdict(COVERAGE, PASS, f"{label}: {coverage} samples drawn in {where}",
                                    epoch=epoch)
    return out


PROBE = Probe(NAME, (MissingDistributedSampler, OverlappingShards, ShardCoverageGap), judge, capture, order=30)
