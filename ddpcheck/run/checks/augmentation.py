"""Random augmentation that repeats across DataLoader workers, epochs or ranks.

What torch 2.13 does (torch/utils/data/_utils/worker.py, dataloader.py): each multi-process
iterator draws a `_base_seed` from the loader's generator, or the rank's global torch RNG when it
has none; worker k seeds `random`, `torch` and (when installed) `numpy.random` from
`base_seed + k`. Random-number *objects* a Dataset holds (`numpy.random.Generator`,
`numpy.random.RandomState`, `random.Random`, `torch.Generator`) are not reseeded: every worker gets a copy in
the state the original had, and non-persistent workers get that same copy again each epoch.

Observed here, cheaply:

- in the rank: each multi-process iterator's base seed (compared across ranks afterwards);
- in each worker (forked from the rank, so the wrapper of `_worker_loop` is inherited): after the
  worker's own seeding and `worker_init_fn`, the RNG objects reachable from the dataset (a few
  levels of attributes) and, over the first fetches, whether they and the global RNGs advanced.
  Each worker writes one small file to the run's record directory; the rank merges them into its
  record. Nothing is sent between processes and no random number is drawn.
"""

from __future__ import annotations

import glob
import json
import os
import zlib
from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

PROBE_NAME = "augmentation"
FETCHES = 3  # fetches a worker watches
MAX_ITERATORS = 8  # per rank
_SCAN_LIMIT = 400  # objects visited when looking for RNG objects in a dataset


class DatasetRngRepeats(RuntimeCheck):
    """A random-number object held by the Dataset starts in the same state in several DataLoader workers.

    ## Why it matters

    torch 2.13 seeds the global `random`, `torch` and (when installed) `numpy.random` generators in
    each DataLoader worker from `base_seed + worker_id`, but a `numpy.random.Generator`,
    `numpy.random.RandomState`, `random.Random` or `torch.Generator` that the Dataset creates in
    `__init__` is copied into every worker in the state it has: the workers draw the same "random"
    crops, flips and noise, and non-persistent workers start from that same copy again every
    epoch. ddpcheck looks at the random-number objects reachable from the dataset in each worker
    (after `worker_init_fn`), notes whether the first fetches drew from them, and reports an object
    that started from the same state in two workers, epochs or ranks and was drawn from.

    ## How to fix

    Create the generator per worker in a `worker_init_fn` from
    `torch.utils.data.get_worker_info().seed`, which differs between workers and epochs (and
    between ranks when their base seeds do), or draw from the global generators, which torch
    reseeds per worker.

    ## References

    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/faq.html#my-data-loader-workers-return-identical-random-numbers
    - https://github.com/pytorch/pytorch/issues/5059
    """

    code = "DDP147"
    hint = "create the generator per worker in worker_init_fn from get_worker_info().seed"
    name = "dataset-rng-repeats"
    severity = Severity.WARNING
    INVALID = ("""
        class Augmented(Dataset):
            def __init__(self, files):
                self.files = files
                self.rng = np.random.default_rng(0)  # one state, copied into every worker

            def __getitem__(self, i):
                return random_crop(load(self.files[i]), self.rng)
    """,)
    VALID = ("""
        def seed_worker(worker_id):
            info = torch.utils.data.get_worker_info()
            info.dataset.rng = np.random.default_rng(info.seed)

        loader = DataLoader(data, num_workers=4, worker_init_fn=seed_worker, sampler=sampler)
    """,)


class IdenticalWorkerSeeds(RuntimeCheck):
    """The DataLoader workers of every rank got the same seeds, and `__getitem__` draws random numbers.

    ## Why it matters

    Each multi-process DataLoader iterator draws a base seed from the loader's `generator`, or from
    the rank's global torch generator when it has none, and seeds worker k's `random`, `torch` and
    `numpy.random` from `base_seed + k` (torch 2.13, `torch/utils/data/_utils/worker.py`). A script
    that calls `torch.manual_seed(S)` with the same S on every rank gives every rank the same base
    seed, so worker k of every rank makes the same random augmentation choices: the global batch
    holds each augmentation world-size times. ddpcheck compares the base seeds across ranks and
    checks, in each worker, whether the first fetches drew from the global generators.

    ## How to fix

    Seed each rank differently, `torch.manual_seed(S + rank)`; DDP copies rank 0's parameters and
    buffers to every rank when it wraps the model, so the initial weights stay identical. Or give
    the DataLoader its own generator: `generator=torch.Generator().manual_seed(S + rank)`.

    ## References

    - https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading
    - https://pytorch.org/docs/stable/notes/randomness.html
    """

    code = "DDP148"
    hint = "seed each rank differently: torch.manual_seed(seed + rank)"
    name = "identical-worker-seeds"
    severity = Severity.WARNING
    INVALID = ("""
        torch.manual_seed(42)  # the same on every rank
        loader = DataLoader(augmented, batch_size=64, sampler=DistributedSampler(augmented), num_workers=4)
    """,)
    VALID = ("""
        torch.manual_seed(42 + dist.get_rank())
        loader = DataLoader(augmented, batch_size=64, sampler=DistributedSampler(augmented), num_workers=4)
    """,)


def capture(session: "Session") -> None:
    import functools

    import torch.utils.data._utils.worker as worker_mod
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    section = session.section(PROBE_NAME)
    section.update(iterators=[], workers=[])
    datasets: dict[int, int] = {}
    record_dir = session.options.record_dir
    rank = session.rank

    original_init: Any = _MultiProcessingDataLoaderIter.__init__

    @functools.wraps(original_init)
    def __init__(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, loader, *args, **kwargs)
        try:
            index = datasets.setdefault(id(loader.dataset), len(datasets))
            if len(section["iterators"]) < MAX_ITERATORS:
                section["iterators"].append({
                    "dataset": index, "base_seed": int(self._base_seed), "workers": self._num_workers,
                    "persistent": bool(self._persistent_workers),
                    "own_generator": loader.generator is not None,
                    "start": _start_method(loader),
                })
            _collect(section, record_dir, rank)
        except Exception:  # noqa: BLE001 - never break the user's loader over a note
            pass

    setattr(_MultiProcessingDataLoaderIter, "__init__", __init__)

    original_loop: Any = worker_mod._worker_loop

    @functools.wraps(original_loop)
    def _worker_loop(*args: Any, **kwargs: Any) -> Any:
        try:
            _spy_on_worker(args, record_dir, rank, len(section["iterators"]))
        except Exception:  # noqa: BLE001
            pass
        return original_loop(*args, **kwargs)

    worker_mod._worker_loop = _worker_loop
    session.at_end.append(lambda why: _collect(section, record_dir, rank))


def _start_method(loader: Any) -> str:
    """How the loader starts its workers: only forked workers inherit the spy."""
    import multiprocessing

    ctx = loader.multiprocessing_context
    if ctx is None:
        return str(multiprocessing.get_start_method(allow_none=True) or "fork")
    return str(ctx if isinstance(ctx, str) else ctx.get_start_method())


def _collect(section: dict[str, Any], record_dir: str, rank: int) -> None:
    """Merge the files this rank's workers wrote into its record."""
    if not record_dir:
        return
    merged = {(w["iterator"], w["worker"]): w for w in section["workers"]}
    for path in sorted(glob.glob(os.path.join(record_dir, f"worker-{rank}-*.json")))[:64]:
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        merged[(data["iterator"], data["worker"])] = data  # the newest: workers rewrite theirs
    section["workers"] = [merged[k] for k in sorted(merged)]


# --- in the worker process --------------------------------------------------------------------

def _spy_on_worker(args: tuple[Any, ...], record_dir: str, rank: int, iterator: int) -> None:
    """Runs in a freshly forked worker before its loop: watch its first fetches."""
    if not record_dir or len(args) < 11:
        return
    dataset, worker_id = args[1], args[10]
    from torch.utils.data import _DatasetKind

    original_create: Any = _DatasetKind.create_fetcher

    def create_fetcher(*c_args: Any, **c_kwargs: Any) -> Any:
        fetcher = original_create(*c_args, **c_kwargs)
        held = _find_rngs(dataset)  # after the worker's seeding and worker_init_fn
        report = {"rank": rank, "iterator": iterator, "worker": worker_id, "pid": os.getpid(),
                  "held": [{"path": p, "type": t, "first": _digest(o), "advanced": False}
                           for p, t, o in held], "global": {}, "fetches": 0}
        original_fetch = fetcher.fetch

        def fetch(index: Any) -> Any:
            if report["fetches"] >= FETCHES:
                return original_fetch(index)
            before = _global_states()
            try:
                return original_fetch(index)
            finally:
                after = _global_states()
                for name in after:
                    if after[name] != before.get(name):
                        report["global"][name] = True
                for entry, (_p, _t, obj) in zip(report["held"], held):
                    if _digest(obj) != entry["first"]:
                        entry["advanced"] = True
                report["fetches"] += 1
                _write(record_dir, report)  # after each watched fetch: the worker may stop anytime

        fetcher.fetch = fetch
        _write(record_dir, report)  # a worker that never fetches still says what it holds
        return fetcher

    setattr(_DatasetKind, "create_fetcher", staticmethod(create_fetcher))


def _write(record_dir: str, report: dict[str, Any]) -> None:
    path = os.path.join(record_dir, f"worker-{report['rank']}-{report['iterator']}-{report['worker']}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            json.dump(report, fh)
        os.replace(tmp, path)
    except OSError:
        pass


def _rng_kind(obj: Any) -> str | None:
    import random
    import sys

    if isinstance(obj, random.Random):
        return "random.Random"
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.random.Generator):
            return "numpy.random.Generator"
        if isinstance(obj, np.random.RandomState):
            return "numpy.random.RandomState"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Generator):
        return "torch.Generator"
    return None


def _find_rngs(dataset: Any) -> list[tuple[str, str, Any]]:
    """(attribute path, kind, object) for the RNG objects reachable from the dataset."""
    found, seen = [], set()
    queue = [("dataset", dataset, 0)]
    visited = 0
    while queue and visited < _SCAN_LIMIT:
        path, obj, depth = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        kind = _rng_kind(obj)
        if kind:
            found.append((path, kind, obj))
            continue
        if depth >= 3 or isinstance(obj, (str, bytes, int, float, bool, type(None))) or hasattr(obj, "shape"):
            continue
        if isinstance(obj, dict):
            children = [(f"{path}[{k!r}]", v) for k, v in list(obj.items())[:50]]
        elif isinstance(obj, (list, tuple)):
            children = [(f"{path}[{i}]", v) for i, v in enumerate(obj[:50])]
        else:
            attrs = getattr(obj, "__dict__", None)
            if not isinstance(attrs, dict):
                continue
            children = [(f"{path}.{k}", v) for k, v in list(attrs.items())[:50]]
        queue.extend((p, v, depth + 1) for p, v in children)
    return found[:8]


def _digest(obj: Any) -> int:
    kind = _rng_kind(obj)
    if kind == "numpy.random.Generator":
        state = repr(obj.bit_generator.state).encode()
    elif kind == "numpy.random.RandomState":
        s = obj.get_state()
        state = s[1].tobytes() + repr(s[2:]).encode()
    elif kind == "random.Random":
        state = repr(obj.getstate()).encode()
    elif kind == "torch.Generator":
        state = obj.get_state().numpy().tobytes()
    else:
        return -1
    return zlib.crc32(state)


def _global_states() -> dict[str, int]:
    import random
    import sys

    out = {"random": zlib.crc32(repr(random.getstate()).encode())}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = zlib.crc32(torch.get_rng_state().numpy().tobytes())
    np = sys.modules.get("numpy")
    if np is not None:
        s = np.random.get_state()
        out["numpy"] = zlib.crc32(s[1].tobytes() + repr(s[2:]).encode())
    return out


# --- in the launcher --------------------------------------------------------------------------

HELD, SEEDS = DatasetRngRepeats.code, IdenticalWorkerSeeds.code


def judge(records: list[dict[str, Any]], ctx: Context) -> list[Verdict]:
    sections = {r["rank"]: r["probes"][PROBE_NAME] for r in records if PROBE_NAME in r.get("probes", {})}
    workers = [w for s in sections.values() for w in s.get("workers", [])]
    if not workers:
        starts = sorted({it.get("start", "fork") for s in sections.values() for it in s.get("iterators", [])})
        if starts and "fork" not in starts:
            why = f"DataLoader workers started with {', '.join(starts)} (only forked workers are watched)"
        else:
            why = "no DataLoader with workers" if sections else "no rank reported"
        return [Verdict(HELD, SKIP, why), Verdict(SEEDS, SKIP, why)]
    return [_held(workers, sections), _seeds(workers, sections)]


def _held(workers: list[dict[str, Any]], sections: dict[int, dict[str, Any]]) -> Verdict:
    # (path, kind) -> first digest -> the (rank, iterator, worker) that started from it and drew
    starts: dict[tuple[str, str], dict[int, list[tuple[int, int, int]]]] = {}
    for w in workers:
        for h in w.get("held", []):
            if h.get("advanced"):
                starts.setdefault((h["path"], h["type"]), {}).setdefault(h["first"], []).append(
                    (w["rank"], w["iterator"], w["worker"]))
    if not starts:
        return Verdict(HELD, PASS, "no random-number object held by a dataset was drawn from in a worker")
    for (path, kind), by_digest in sorted(starts.items()):
        for users in by_digest.values():
            if len(users) < 2:
                continue
            how = _how_repeated(users)
            attr = path.replace("dataset.", "", 1)
            return Verdict(
                HELD, FAIL, f"{attr} ({kind}) starts in the same state {how}",
                message=(f"The dataset's `{attr}` ({kind}, created once and copied into every "
                         f"DataLoader worker as it is) started from the same state {how}, so the "
                         "same \"random\" augmentation was drawn there. torch reseeds only the global "
                         "`random`, `numpy.random` and `torch` generators in each worker. Create it "
                         "per worker in a worker_init_fn from "
                         "torch.utils.data.get_worker_info().seed (different for each worker and "
                         "epoch), or draw from the global generators."),
                ranks=tuple(sorted({u[0] for u in users})),
                details={"attribute": attr, "type": kind, "workers": users[:16]})
    return Verdict(HELD, PASS, "random-number objects held by the dataset differ between workers")


def _how_repeated(users: list[tuple[int, int, int]]) -> str:
    """Where the same starting state was seen: workers of one loader, epochs, ranks."""
    parts = []
    by_pass: dict[tuple[int, int], list[int]] = {}
    by_worker: dict[tuple[int, int], set[int]] = {}
    for rank, iterator, worker in users:
        by_pass.setdefault((rank, iterator), []).append(worker)
        by_worker.setdefault((rank, worker), set()).add(iterator)
    together = next((sorted(ws) for ws in by_pass.values() if len(ws) > 1), None)
    if together:
        parts.append("in workers " + _and(together[:4]) + " of the same DataLoader")
    if any(len(its) > 1 for its in by_worker.values()):
        parts.append("again in every epoch (new workers start from the untouched original)")
    ranks = sorted({u[0] for u in users})
    if len(ranks) > 1:
        parts.append("on ranks " + _and(ranks))
    return ", ".join(parts) or "in several workers"


def _and(items: list[int]) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _seeds(workers: list[dict[str, Any]], sections: dict[int, dict[str, Any]]) -> Verdict:
    if len(sections) < 2:
        return Verdict(SEEDS, SKIP, "one rank")
    used = sorted({name for w in workers for name, moved in w.get("global", {}).items() if moved})
    by_rank = {r: [it["base_seed"] for it in s.get("iterators", [])] for r, s in sections.items()}
    n = min(len(v) for v in by_rank.values())
    same = [i for i in range(n) if len({v[i] for v in by_rank.values()}) == 1]
    if not n:
        return Verdict(SEEDS, SKIP, "no multi-process DataLoader on every rank")
    if not same:
        return Verdict(SEEDS, PASS, "each rank's workers got their own base seed")
    if not used:
        return Verdict(SEEDS, PASS, "ranks share worker seeds, but __getitem__ drew no random numbers "
                       "from the global generators")
    gens = ", ".join(f"`{u}`" for u in used)
    return Verdict(
        SEEDS, FAIL, f"the same worker base seed on every rank; __getitem__ draws from {gens}",
        message=("Every rank's DataLoader gave its workers the same base seed (the rank's torch RNG "
                 "was seeded alike on every rank, e.g. torch.manual_seed(S)), and __getitem__ draws "
                 f"from {gens}, so worker k of every rank makes the same random augmentation choices. "
                 "Seed each rank differently (torch.manual_seed(S + rank); DDP copies rank 0's weights "
                 "to every rank when it wraps the model, so they stay identical), or pass "
                 "generator=torch.Generator().manual_seed(S + rank) to the DataLoader."),
        ranks=tuple(sorted(sections)), details={"generators": used, "iterators": same})


PROBE = Probe(PROBE_NAME, (DatasetRngRepeats, IdenticalWorkerSeeds), judge, capture, order=90)
