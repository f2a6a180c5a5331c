"""Which dataset indices each rank draws, per DataLoader pass: the capture that the shards,
set_epoch, evaluation and inputs probes all read, and the helpers that read it back.

Captured where the loader's iterator takes the next index from its sampler
(`_BaseDataLoaderIter._next_index`), so worker prefetching and persistent workers lose nothing
(wrapping `DataLoader.__iter__` loses the first prefetch_factor × num_workers batches). A new
`_sampler_iter` object marks a new pass. Each probe that needs it installs it through its own
capture; it is installed once per rank.
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

from ddpcheck.run.records import Record

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session


SECTION = "shards"  # the rank record's part that holds the indices (the shards probe's)
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

    section = session.section(SECTION)
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
            record["trained"] = session.trained_since(record["step"])
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
            before = state["epoch"].record
            if not before["complete"]:  # (a complete pass was read when it ended)
                before["trained"] = session.trained_since(before["step"])
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
                record = state["epoch"].record
                if not record["complete"]:
                    record["trained"] = session.trained_since(record["step"])
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
        for info in r.get("probes", {}).get(SECTION, {}).get("loaders", []):
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
