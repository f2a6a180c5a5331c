"""The model each rank wraps in DDP, compared across ranks at the wrap, before torch's own check.

torch's `DistributedDataParallel.__init__` verifies that every rank holds the same number of
parameters with the same shapes, and fails with "DDP expects same model across all ranks, but
Rank 1 has 4 params, while rank 0 has inconsistent 6 params" or "params[0] in this process with
sizes [24, 8] appears not to match": counts and indices, not names. A difference in dtype or
`requires_grad` passes that check and breaks later (a bucket of another size, a gradient never
reduced). Here every rank sends a digest of its parameters' (name, shape, dtype, requires_grad)
over ddpcheck's own group just before DDP's constructor runs; when the digests differ, the ranks
swap their lists once and the first parameter that differs is named, with the ranks on each
side and, where it was seen, the line of the user's code that built it (`register_parameter`, as
`self.fc = nn.Linear(...)` does), materialised it (a lazy module's first forward), changed its
dtype (`.double()`, `.half()`, `.to(dtype)`) or its `requires_grad` (`requires_grad_()`).
Models wrapped over a process group other than the default one are not compared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import threading
import weakref
import zlib

from ddpcheck.findings import Severity
from ddpcheck.run.records import Record, section
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session


class ModelDiffersAcrossRanks(RuntimeCheck):
    """The model wrapped in DDP is not the same on every rank: a parameter differs in name, shape, dtype or `requires_grad`.

    ## Why it matters

    DDP keeps one replica per rank and reduces their gradients bucket by bucket, so every rank
    must hold the same parameters in the same order. torch checks only their number and shapes,
    and says so by index ("Rank 1 has 4 params, while rank 0 has inconsistent 6 params",
    "params[0] ... appears not to match sizes"); a dtype or `requires_grad` that differs passes
    that check and fails later, or hangs. The usual causes: a branch on the rank while building
    the model (`if rank == 0: self.aux = ...`), a size read from per-rank data or settings, a
    lazy module whose first forward saw a different input on each rank, a checkpoint or a
    conversion applied on one rank only. ddpcheck compares the ranks' parameters as DDP's
    constructor starts and names the first one that differs, the ranks on each side, and the line
    that built or changed it when it saw that line.

    ## How to fix

    Build the model the same way on every rank: take sizes from configuration every rank reads
    alike, keep rank-dependent code out of the model's construction, run a lazy module's first
    forward on the same shapes everywhere, and load checkpoints or convert dtypes on every rank
    before wrapping it in DDP.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP116"
    name = "model-differs-across-ranks"
    severity = Severity.ERROR
    needs = "init"
    # DDP's constructor then fails on every rank, or its first gradient all-reduce differs.
    explains = ("DDP120", "DDP128")
    INVALID = ("""
        model = Net()
        if dist.get_rank() == 0:
            model.aux_head = nn.Linear(16, 3)
        model = DDP(model)
    """,)
    VALID = ("""
        model = Net()
        model.aux_head = nn.Linear(16, 3)  # on every rank
        model = DDP(model)
    """,)


NAME = "model"
MAX_SITES = 200_000  # parameters whose building site is remembered (models rebuilt in a loop stop here)

Signature = list[Any]  # [name, shape, dtype, requires_grad]


def capture(session: Session) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn import Module

    from ddpcheck.run.rank.sites import call_site

    part = session.section(NAME)
    part["wraps"] = []
    sites: dict[int, tuple[weakref.ref[Any], dict[str, str]]] = {}
    converting = threading.local()

    def remember(param: Any, what: str) -> None:
        entry = sites.get(id(param))
        if entry is None or entry[0]() is not param:
            if len(sites) >= MAX_SITES:
                return
            try:
                entry = (weakref.ref(param), {})
            except TypeError:
                return
            sites[id(param)] = entry
        where = call_site(2)
        if where is not None:
            entry[1][what] = where

    original_register = Module.register_parameter

    def register_parameter(self: Any, name: str, param: Any) -> None:
        original_register(self, name, param)
        if param is not None:
            remember(param, "built")

    original_requires_grad = torch.Tensor.requires_grad_

    def requires_grad_(self: Any, requires_grad: bool = True) -> Any:
        out = original_requires_grad(self, requires_grad)
        if isinstance(self, torch.nn.Parameter):
            remember(self, "requires_grad")
        return out

    original_apply: Any = Module._apply

    def _apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(converting, "active", False):
            return original_apply(self, *args, **kwargs)
        before = {id(p): p.dtype for p in self.parameters()}
        converting.active = True
        try:
            out = original_apply(self, *args, **kwargs)
        finally:
            converting.active = False
        for p in self.parameters():
            if before.get(id(p), p.dtype) != p.dtype:
                remember(p, "dtype")
        return out

    setattr(Module, "register_parameter", register_parameter)
    setattr(torch.Tensor, "requires_grad_", requires_grad_)
    setattr(Module, "_apply", _apply)
    mixin: Any = getattr(torch.nn.parameter, "UninitializedTensorMixin", None)
    if mixin is not None:
        original_materialize: Any = mixin.materialize

        def materialize(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original_materialize(self, *args, **kwargs)
            remember(self, "materialized")
            return out

        setattr(mixin, "materialize", materialize)

    def signature(module: Any) -> tuple[list[Signature], list[dict[str, str]]]:
        ignored = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))
        rows: list[Signature] = []
        where: list[dict[str, str]] = []
        for name, p in module.named_parameters():
            if name in ignored:
                continue
            rows.append([name, list(p.shape), str(p.dtype).replace("torch.", ""), bool(p.requires_grad)])
            entry = sites.get(id(p))
            where.append(dict(entry[1]) if entry is not None and entry[0]() is p else {})
        return rows, where

    def before_ddp_init(module: Any, group: Any) -> None:
        wrap: dict[str, Any] = {"index": len(part["wraps"]), "compared": False}
        part["wraps"].append(wrap)
        if not isinstance(module, Module) or session.group is None or not session.exchange_ok:
            return
        if session.world_size < 2 or session.uneven:
            return
        if group is not None and group is not dist.GroupMember.WORLD:
            if not isinstance(group, dist.ProcessGroup) or group.size() != dist.get_world_size():
                return  # a model replicated over part of the job: its peers are not ours to know
        rows, where = signature(module)
        digest = zlib.crc32(repr(rows).encode())
        from ddpcheck.run.rank.ledger import LEDGER

        LEDGER.enter_ours("ddpcheck's comparison of the model wrapped in DDP")
        try:
            mine = torch.tensor([digest, len(rows)], dtype=torch.int64)
            out = [torch.empty_like(mine) for _ in range(session.world_size)]
            dist.all_gather(out, mine, group=session.group)
            digests = [int(t[0]) for t in out]
            wrap.update(compared=True, params=len(rows), digests=digests)
            if len(set(digests)) == 1:
                return
            lists: list[Any] = [None] * session.world_size
            dist.all_gather_object(lists, rows, group=session.group)
        finally:
            LEDGER.leave_ours()
        found = first_difference({r: [tuple(_hashable(x) for x in row) for row in rows_r]
                                  for r, rows_r in enumerate(lists)})
        if found is None:
            return
        index, name = found
        wrap["difference"] = {"index": index, "name": name,
                              "ranks": {str(r): (list(rows_r[index]) if index < len(rows_r) else None)
                                        for r, rows_r in enumerate(lists)},
                              "counts": {str(r): len(rows_r) for r, rows_r in enumerate(lists)}}
        mine_sites = next((where[i] for i, row in enumerate(rows) if row[0] == name), {})
        if mine_sites:
            wrap["sites"] = {str(session.rank): mine_sites}
        session.flush(force=True)

    session.before_ddp_init.append(before_ddp_init)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def first_difference(per_rank: dict[int, list[tuple[Any, ...]]]) -> tuple[int, str] | None:
    """(position, parameter name) of the first parameter whose (name, shape, dtype,
    requires_grad) is not the same on every rank, in DDP's order (or that some rank lacks)."""
    longest = max(len(rows) for rows in per_rank.values())
    for i in range(longest):
        seen = {rows[i] if i < len(rows) else None for rows in per_rank.values()}
        if len(seen) > 1:
            name = next(rows[i][0] for rows in per_rank.values() if i < len(rows))
            return i, str(name)
    return None


# --- in the launcher ------------------------------------------------------------------------------

def _describe(row: list[Any] | None) -> str:
    if row is None:
        return "no such parameter"
    name, shape, dtype, grad = row
    return f"'{name}' {list(shape)} {dtype}{'' if grad else ' requires_grad=False'}"


def _side(rows: dict[int, list[Any] | None], ranks: tuple[int, ...]) -> str:
    who = ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))
    return f"{who}: {_describe(rows[ranks[0]])}"


def _where_said(sites: dict[str, str]) -> list[tuple[str, str]]:
    order = (("built", "built at"), ("materialized", "shape set by its first forward at"),
             ("dtype", "dtype changed at"), ("requires_grad", "requires_grad changed at"))
    return [(sites[k], text) for k, text in order if k in sites]


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    wraps: dict[int, dict[int, dict[str, Any]]] = {}
    for r in records:
        for w in section(r, NAME).get("wraps", []):
            wraps.setdefault(int(w["index"]), {})[int(r["rank"])] = w
    compared = [w for per in wraps.values() for w in per.values() if w.get("compared")]
    if not compared:
        if not wraps:
            return [Verdict(ModelDiffersAcrossRanks.code, SKIP, "no model was wrapped in DDP")]
        return [Verdict(ModelDiffersAcrossRanks.code, SKIP, "the DDP model's process group is not the whole job's")]
    for index, per_rank in sorted(wraps.items()):
        diff = next((w["difference"] for w in per_rank.values() if w.get("difference")), None)
        if diff is None:
            continue
        rows = {int(r): v for r, v in diff["ranks"].items()}
        groups: dict[Any, list[int]] = {}
        for rank, row in sorted(rows.items()):
            groups.setdefault(repr(row), []).append(rank)
        sides = sorted((tuple(g) for g in groups.values()), key=lambda g: (-len(g), g[0]))
        shown = "; ".join(_side(rows, g) for g in sides)
        counts = {int(r): int(n) for r, n in diff["counts"].items()}
        count_text = ""
        if len(set(counts.values())) > 1:
            count_text = " (" + ", ".join(f"rank {r}: {n} parameters" for r, n in sorted(counts.items())) + ")"
        sites: dict[str, str] = {}
        for w in per_rank.values():
            for said in (w.get("sites") or {}).values():
                for key, value in said.items():
                    sites.setdefault(key, value)
        told = _where_said(sites)
        path = line = None
        where_text = ""
        if told:
            where_text = " It was " + ", ".join(f"{text} {_short(site)}" for site, text in told) + "."
            path, _, number = told[-1][0].rpartition(":")
            line = int(number) if number.isdigit() else None
        name = diff["name"]
        odd = tuple(r for g in sides[1:] for r in g)
        which = f" (the DDP model #{index + 1} of this run)" if index else ""
        message = (f"The model wrapped in DDP{which} is not the same on every rank: parameter "
                   f"#{diff['index'] + 1} differs — {shown}{count_text}.{where_text} DDP needs the same "
                   "parameters, in the same order, with the same shapes, dtypes and requires_grad on "
                   "every rank: build the model the same way everywhere before wrapping it.")
        return [Verdict(ModelDiffersAcrossRanks.code, FAIL, f"parameter '{name}': {shown}", message=message, ranks=odd,
                        path=path or None, line=line,
                        details={"parameter": name, "position": diff["index"], "ranks": diff["ranks"],
                                 "counts": diff["counts"], "sites": sites})]
    n = max(int(w.get("params", 0)) for w in compared)
    return [Verdict(ModelDiffersAcrossRanks.code, PASS, f"the same {n} parameters (names, shapes, dtypes, requires_grad) on every rank")]


def _short(site: str) -> str:
    import os

    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


PROBE = Probe(NAME, (ModelDiffersAcrossRanks,), judge, capture, order=15)
