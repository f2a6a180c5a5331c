"""Inside a rehearsed rank (`ddpcheck run --rehearse 8,64,512`): one rank of a large world, alone.

The launcher starts this process with the environment torchrun would give rank R of a world of W
(rehearse/plan.py) and `DDPCHECK_REHEARSE` set. Installed after the hook layer and the probes:

- `init_process_group` gets PyTorch's fake backend (torch/testing/_internal/distributed/fake_pg.py:
  every collective returns at once, locally) and a FakeStore, whatever backend and init method the
  script asked for; ranks it did not pass come from the environment, as with `env://`;
- every DDP model gets a communication hook that hands back the rank's own bucket (DDP on the fake
  backend cannot finish a backward without one);
- the run is bounded: a data loader pass ends after `steps_per_pass` optimizer steps (or
  `max_batches` batches without one), so that the script goes on to its evaluation and its next
  epoch; the rank stops after `passes` passes over one loader, `max_steps` optimizer steps, or
  `time_limit` seconds (then Python's faulthandler writes where it waits, and the launcher calls it
  blocked);
- what it records, under `rehearsal` in the rank record: every loader (where it was made, its
  dataset's length, batch size, drop_last, its sampler's parameters) and each pass over it (full
  length `len(loader)`, batches drawn, optimizer steps taken, the first indices drawn), every
  optimizer's learning rate and the samples per optimizer step, the CUDA device the rank set, and
  why it stopped. The collectives are the hang ledger's (rank/ledger.py), as in a real run.
"""

from __future__ import annotations

import faulthandler
import functools
import json
import os
import time
import weakref
from typing import Any

from ddpcheck.run.run_options import ENV_EMULATED_DEVICES
from ddpcheck.run.run_options import ENV_REHEARSE as ENV
from ddpcheck.run.rank import ending, sites
from ddpcheck.run.rank.session import Session, guard

SECTION = "rehearsal"
INDICES_KEPT = 64  # indices kept per pass (the shard sizes are computed, not read from these)
DEFAULTS = {"steps_per_pass": 2, "max_batches": 8, "passes": 2, "max_steps": 8, "time_limit": 60.0}


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def limits() -> dict[str, Any]:
    try:
        given = json.loads(os.environ.get(ENV, "") or "{}")
    except ValueError:
        given = {}
    return {**DEFAULTS, **{k: v for k, v in given.items() if k in DEFAULTS}}


class Rehearsal:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.limits = limits()
        self.part = session.section(SECTION)
        self.part.update(loaders=[], optimizers=[], steps=0, stopped=None, samples_per_step=[],
                         backend_asked=None, comm_hook=None, device=None)
        self.loaders: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self.current: dict[str, Any] | None = None  # the pass a step is counted in
        self.opening: dict[str, Any] | None = None  # the pass whose iterator is being made
        self.samples_since_step = 0
        self.optimizers: dict[int, dict[str, Any]] = {}
        self.started = time.monotonic()

    # --- the end ----------------------------------------------------------------------------
    def stop(self, why: str) -> None:
        """The bound is reached: record why, write the record as at a normal end, leave."""
        self.part["stopped"] = why
        faulthandler.cancel_dump_traceback_later()
        try:
            self.session.finish(0)
        finally:
            ending.leave(0)

    # --- process group ----------------------------------------------------------------------
    def before_init(self, kwargs: dict[str, Any]) -> None:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        self.part["backend_asked"] = None if kwargs.get("backend") is None else str(kwargs["backend"])
        kwargs["backend"] = "fake"
        kwargs["init_method"] = None
        kwargs["store"] = FakeStore()
        kwargs.pop("device_id", None)
        for key, var in (("rank", "RANK"), ("world_size", "WORLD_SIZE")):
            if kwargs.get(key) in (None, -1):
                kwargs[key] = int(os.environ.get(var, "0" if key == "rank" else "1"))

    def on_ddp_init(self, ddp: Any) -> None:
        import torch

        def local_bucket(state: object, bucket: Any) -> torch.futures.Future[torch.Tensor]:
            fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        local_bucket.__annotations__ = {}  # DDP reads them, and these are strings here, not types
        try:
            ddp.register_comm_hook(None, local_bucket)
            self.part["comm_hook"] = "local bucket"
        except Exception as exc:  # noqa: BLE001 - the script's own hook came first
            self.part["comm_hook"] = f"{type(exc).__name__}: {exc}"[:200]
        device = getattr(ddp, "_ddpcheck_device", None)
        if device is not None:
            self.part["ddp_device"] = str(device)

    # --- data -------------------------------------------------------------------------------
    def loader_info(self, loader: Any) -> dict[str, Any]:
        info = self.loaders.get(loader)
        if info is not None:
            return info
        info = {"loader": len(self.part["loaders"]), "site": getattr(loader, "_ddpcheck_made_at", None),
                "batch_size": getattr(loader, "batch_size", None), "drop_last": bool(getattr(loader, "drop_last", False)),
                "dataset_len": _length(getattr(loader, "dataset", None)), "sampler": None, "passes": []}
        dataset = getattr(loader, "dataset", None)
        inner = getattr(dataset, "dataset", None)  # a Subset: the dataset it was cut from
        if inner is not None and getattr(dataset, "indices", None) is not None:
            info["parent_len"] = _length(inner)
        sampler = getattr(loader, "sampler", None)
        if sampler is not None:
            facts: dict[str, Any] = {"class": type(sampler).__name__}
            for name in ("num_replicas", "rank", "shuffle", "seed", "drop_last", "num_samples", "total_size"):
                value = getattr(sampler, name, None)
                if isinstance(value, (bool, int, float, str)):
                    facts[name] = value
            from torch.utils.data.distributed import DistributedSampler

            facts["distributed"] = isinstance(sampler, DistributedSampler)
            info["sampler"] = facts
        self.loaders[loader] = info
        self.part["loaders"].append(info)
        return info

    def start_pass(self, loader: Any, site: str | None) -> dict[str, Any]:
        info = self.loader_info(loader)
        if len(info["passes"]) >= int(self.limits["passes"]):
            self.stop(f"data loader {info['loader']} started pass {len(info['passes']) + 1}")
        sampler = getattr(loader, "sampler", None)
        p: dict[str, Any] = {"pass": len(info["passes"]), "site": site, "epoch": getattr(sampler, "epoch", None),
             "length": _length(loader), "batches": 0, "samples": 0, "steps": 0, "truncated": False,
             "indices": []}
        info["passes"].append(p)
        self.current = p
        self.session.flush(force=True)
        return p

    def next_batch(self, p: dict[str, Any]) -> bool:
        """False: this pass has given enough; end it here."""
        if p["steps"] >= int(self.limits["steps_per_pass"]) or p["batches"] >= int(self.limits["max_batches"]) \
                and p["steps"] == 0:
            p["truncated"] = True
            return False
        return True

    def batch_drawn(self, p: dict[str, Any], data: Any, batch_size: int | None) -> None:
        n = _batch_len(data) or batch_size or 1
        p["batches"] += 1
        p["samples"] += n
        self.samples_since_step += n

    def indices_drawn(self, p: dict[str, Any], index: Any) -> None:
        batch = list(index) if isinstance(index, (list, tuple)) else [index]
        room = INDICES_KEPT - len(p["indices"])
        if room > 0:
            p["indices"].extend(i if isinstance(i, (int, str)) else repr(i) for i in batch[:room])

    # --- optimizer --------------------------------------------------------------------------
    def stepped(self, optimizer: Any) -> None:
        if self.session.nested_step():
            return
        self.part["steps"] += 1
        if self.current is not None:
            self.current["steps"] += 1
            if self.current["steps"] == 1:  # the samples of one whole step, from this pass alone
                self.current["step_samples"] = self.current["samples"]
        per_step = self.part["samples_per_step"]
        if len(per_step) < 32:
            per_step.append(self.samples_since_step)
        self.samples_since_step = 0
        entry = self.optimizer_seen(optimizer)
        if entry is not None:
            entry["steps"] += 1
        if self.part["steps"] >= int(self.limits["max_steps"]):
            self.stop(f"{self.part['steps']} optimizer steps")

    def optimizer_seen(self, optimizer: Any) -> dict[str, Any] | None:
        """The optimizer's entry, its learning rate (first param group) taken in: at construction
        (a rank that never steps still says what it would use) and at every step (a warm-up)."""
        try:
            lr: float | None = float(optimizer.param_groups[0]["lr"])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            lr = None
        entry = self.optimizers.get(id(optimizer))
        if entry is None:
            if len(self.optimizers) >= 8:
                return None
            entry = self.optimizers[id(optimizer)] = {"class": type(optimizer).__name__, "first": lr, "max": lr,
                                                      "steps": 0}
            self.part["optimizers"].append(entry)
        if lr is not None:
            entry["max"] = lr if entry["max"] is None else max(entry["max"], lr)
        return entry

    def optimizer_made(self, optimizer: Any) -> None:
        entry = self.optimizer_seen(optimizer)
        if entry is not None:
            entry["site"] = sites.call_site(2)

    def finishing(self, code: int, error: BaseException | None) -> None:
        from ddpcheck.run.rank import emulate

        if emulate.enabled():
            self.part["device"] = emulate._current_device


def _length(obj: Any) -> int | None:
    try:
        return int(len(obj))
    except Exception:  # noqa: BLE001 - an IterableDataset, or a len() that raises
        return None


def _batch_len(data: Any) -> int | None:
    """Samples in a batch: the first dimension of its first tensor."""
    for _ in range(4):
        if isinstance(data, dict):
            data = next(iter(data.values()), None)
        elif isinstance(data, (list, tuple)):
            data = data[0] if data else None
        else:
            break
    shape = getattr(data, "shape", None)
    return int(shape[0]) if shape else None


def _wrap_loaders(rehearsal: Rehearsal) -> None:
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original_init: Any = DataLoader.__init__
    original_iter: Any = DataLoader.__iter__
    original_next: Any = _BaseDataLoaderIter.__next__
    original_index: Any = _BaseDataLoaderIter._next_index
    original_iter_init: Any = _BaseDataLoaderIter.__init__

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            object.__setattr__(self, "_ddpcheck_made_at", sites.call_site(1))
        except Exception:  # noqa: BLE001
            pass

    @functools.wraps(original_iter)
    def __iter__(self: Any) -> Any:
        rehearsal.opening = rehearsal.start_pass(self, sites.call_site(1))
        try:
            return original_iter(self)
        finally:
            rehearsal.opening = None

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        p = getattr(self, "_ddpcheck_rehearsal", None)
        if p is not None and not rehearsal.next_batch(p):
            raise StopIteration
        data = original_next(self)
        if p is not None:
            guard(rehearsal.batch_drawn, p, data, getattr(self, "_ddpcheck_batch_size", None))
        return data

    @functools.wraps(original_iter_init)
    def iter_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        # Before the original: with workers, the first indices are dispatched inside it.
        if rehearsal.opening is not None:
            self._ddpcheck_rehearsal, rehearsal.opening = rehearsal.opening, None
            self._ddpcheck_batch_size = getattr(loader, "batch_size", None)
        original_iter_init(self, loader, *args, **kwargs)

    @functools.wraps(original_index)
    def _next_index(self: Any) -> Any:
        index = original_index(self)
        p = getattr(self, "_ddpcheck_rehearsal", None)
        if p is not None:
            guard(rehearsal.indices_drawn, p, index)
        return index

    setattr(DataLoader, "__init__", __init__)
    setattr(DataLoader, "__iter__", __iter__)
    setattr(_BaseDataLoaderIter, "__next__", __next__)
    setattr(_BaseDataLoaderIter, "_next_index", _next_index)
    setattr(_BaseDataLoaderIter, "__init__", iter_init)


def _wrap_optimizers(rehearsal: Rehearsal) -> None:
    from torch.optim import Optimizer

    original: Any = Optimizer.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not getattr(self, "_ddpcheck_rehearsed", False):  # a subclass's __init__ calls ours once
            setattr(self, "_ddpcheck_rehearsed", True)
            guard(rehearsal.optimizer_made, self)

    setattr(Optimizer, "__init__", __init__)


def install(session: Session) -> None:
    """Make this process a lone rank of the world its environment names (see the module's text)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    rehearsal = Rehearsal(session)
    part = rehearsal.part
    part.update(rank=session.rank, world_size=session.world_size, local_rank=session.local_rank,
                node=int(os.environ.get("GROUP_RANK", "0")),
                gpus_per_node=int(os.environ.get(ENV_EMULATED_DEVICES) or os.environ.get("LOCAL_WORLD_SIZE", "1")), limits=rehearsal.limits)
    session.before_init.append(rehearsal.before_init)
    session.on_ddp_init.append(rehearsal.on_ddp_init)
    session.before_finish.append(rehearsal.finishing)
    register_optimizer_step_post_hook(lambda opt, args, kwargs: rehearsal.stepped(opt))
    _wrap_loaders(rehearsal)
    _wrap_optimizers(rehearsal)
    stack_file = os.path.join(session.options.record_dir or ".", f"stack-{session.rank}.txt")
    try:
        out = open(stack_file, "w")  # kept open for faulthandler until the process ends
        faulthandler.dump_traceback_later(float(rehearsal.limits["time_limit"]), exit=True, file=out)
    except OSError:
        pass
