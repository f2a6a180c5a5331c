"""Reentrant activation checkpointing inside a DDP model, named as the cause when DDP breaks.

`torch.utils.checkpoint.checkpoint` is wrapped: for every reentrant call (`use_reentrant=True`, or
not given, which torch up to 2.13 treats as True) made while a DDP model exists and autograd is on,
the probe keeps the user's call site, whether any tensor input required grad, the checkpointed
module's parameters, and whether the same function was checkpointed twice between two optimizer
steps. Reentrant checkpointing runs its forward under no_grad and re-runs it inside backward, which
DDP does not see coming:

- no input requires grad: the checkpoint computes no gradient for the parameters inside, DDP's
  reduction never completes (the other gradients of that step are not synchronised) and the
  next forward fails with "Expected to have finished reduction";
- the same parameters in two reentrant backwards (the same block checkpointed twice, or
  `find_unused_parameters=True`, whose graph walk cannot see inside the checkpoint): "Expected to
  mark a variable ready only once".

The judge fails only when the run shows the damage (gradients that differ, those errors, or
parameters inside a checkpoint that never got a gradient); a reentrant checkpoint that trained
correctly passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

    from ddpcheck.run.rank.session import Session

PROBE_NAME = "checkpointing"
MAX_SITES = 16
ERRORS = {
    "Expected to mark a variable ready only once": "ready-twice",
    "Expected to have finished reduction in the prior iteration": "unfinished",
}


class ReentrantCheckpoint(RuntimeCheck):
    """Reentrant activation checkpointing broke DDP: it is named as the cause of the failure it made.

    ## Why it matters

    `torch.utils.checkpoint.checkpoint` with `use_reentrant=True` (what torch 2.13 uses when the
    argument is not given, with a warning) runs the checkpointed forward under `no_grad` and runs it
    again inside backward. DDP does not expect that: when no input of the checkpointed function
    requires grad (the first block of a network, fed the data batch) the parameters inside get no
    gradient, DDP's reduction of that step never completes, the other gradients are not
    synchronised (they differ across ranks) and the next forward fails with "Expected to have
    finished reduction in the prior iteration"; when the same parameters go through two reentrant
    backwards (a block checkpointed twice, or `find_unused_parameters=True`, whose graph walk
    cannot see inside the checkpoint) DDP raises "Expected to mark a variable ready only once".
    ddpcheck records each reentrant checkpoint call made while a DDP model exists (its line,
    whether an input required grad, the parameters inside, repeats within a step) and, when the run
    shows the damage, reports the checkpoint as the cause in place of the gradient mismatch or the
    unused-parameter finding it explains.

    ## How to fix

    Pass `use_reentrant=False`: the non-reentrant implementation works with DDP as is, including
    unused parameters and repeated checkpoints. Otherwise make an input of the checkpointed
    function require grad, and for a block checkpointed twice use `DDP(..., static_graph=True)`.

    ## References

    - https://pytorch.org/docs/stable/checkpoint.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://github.com/pytorch/pytorch/issues/84589
    - https://github.com/huggingface/accelerate/issues/389
    """

    code = "DDP145"
    hint = "pass use_reentrant=False to torch.utils.checkpoint"
    name = "reentrant-checkpoint-breaks-ddp"
    severity = Severity.ERROR
    # What it makes fail: the gradients of the step whose reduction never completed (and the
    # parameters that then drift), parameters without a gradient, DDP's error at the next
    # forward and the crash it is.
    explains = ("DDP105", "DDP106", "DDP112", "DDP146", "DDP120")
    INVALID = ("""
        def forward(self, images):
            h = checkpoint(self.stem, images)  # use_reentrant not given: reentrant; images need no grad
            return self.head(checkpoint(self.body, h))
    """,)
    VALID = ("""
        def forward(self, images):
            h = checkpoint(self.stem, images, use_reentrant=False)
            return self.head(checkpoint(self.body, h, use_reentrant=False))
    """,)


def capture(session: "Session") -> None:
    import functools

    import torch
    import torch.utils.checkpoint as cp

    from ddpcheck.run.rank import sites

    section = session.section(PROBE_NAME)
    section.update(sites=[], static_graph=None, find_unused_parameters=None)
    by_site: dict[str, dict[str, Any]] = {}
    window: dict[int, int] = {}  # id(function) -> reentrant calls since the last optimizer step
    original: Any = cp.checkpoint

    @functools.wraps(original)
    def checkpoint(function: Any, *args: Any, use_reentrant: bool | None = None, **kwargs: Any) -> Any:
        reentrant = True if use_reentrant is None else bool(use_reentrant)
        if reentrant and torch.is_grad_enabled() and session.ddp_modules:
            try:
                _note(function, args, use_reentrant)
            except Exception:  # noqa: BLE001 - never break the user's forward over a note
                pass
        return original(function, *args, use_reentrant=use_reentrant, **kwargs)

    def _note(function: Any, args: tuple[Any, ...], given: bool | None) -> None:
        site = sites.call_site(2) or "?"
        entry = by_site.get(site)
        if entry is None:
            if len(by_site) >= MAX_SITES:
                return
            entry = {"site": site, "calls": 0, "no_grad_input": 0, "repeated": 0,
                     "use_reentrant": given, "function": _describe(function),
                     "params": _param_names(session, function)}
            by_site[site] = entry
            section["sites"].append(entry)
        entry["calls"] += 1
        if not any(getattr(a, "requires_grad", False) for a in args):
            entry["no_grad_input"] += 1
        key = id(getattr(function, "__self__", function))
        window[key] = window.get(key, 0) + 1
        if window[key] > 1:
            entry["repeated"] += 1

    cp.checkpoint = checkpoint

    def on_ddp_init(ddp: DistributedDataParallel) -> None:
        section["static_graph"] = bool(getattr(ddp, "static_graph", False))
        section["find_unused_parameters"] = bool(getattr(ddp, "find_unused_parameters", False))

    session.on_ddp_init.append(on_ddp_init)
    # A new window at every optimizer step (the step hooks of the session fire only at checked
    # steps; a repeat is caught in the first ones, and DDP's error names the rest).
    session.after_step.append(lambda optimizer, step: window.clear())


def _describe(function: Any) -> str:
    owner = getattr(function, "__self__", None)
    target = owner if owner is not None and hasattr(owner, "named_parameters") else function
    name = type(target).__name__ if hasattr(target, "named_parameters") else getattr(function, "__qualname__", "")
    return str(name)[:80]


def _param_names(session: "Session", function: Any) -> list[str]:
    owner = getattr(function, "__self__", None)
    module = function if hasattr(function, "parameters") else owner
    if module is None or not hasattr(module, "parameters"):
        return []
    names = [session.name_of(p, "") for p in module.parameters()]
    return [n for n in names if n][:20]


def judge(records: list[dict[str, Any]], ctx: Context) -> list[Verdict]:
    sections = {r["rank"]: r["probes"][PROBE_NAME] for r in records if PROBE_NAME in r.get("probes", {})}
    entries = [e for s in sections.values() for e in s.get("sites", [])]
    if not entries:
        return [Verdict(ReentrantCheckpoint.code, SKIP, "no reentrant torch.utils.checkpoint in a DDP model")]
    site = _short(entries[0]["site"])
    damage = _damage(records, entries)
    if not damage:
        return [Verdict(ReentrantCheckpoint.code, PASS, f"reentrant checkpoint at {site}: DDP kept the gradients in sync")]
    first = next(iter(sections.values()))
    cause, fix = _cause(entries, first)
    where = ", ".join(sorted({_short(e["site"]) for e in entries}))
    path, _, line = str(entries[0]["site"]).rpartition(":")
    return [Verdict(
        ReentrantCheckpoint.code, FAIL, f"reentrant checkpoint at {where}: {damage}",
        message=(f"Reentrant activation checkpointing (torch.utils.checkpoint at {where}, "
                 f"use_reentrant={'not given, so True' if entries[0]['use_reentrant'] is None else 'True'}) "
                 f"broke DDP in this run: {damage}. {cause} {fix}"),
        path=path or None, line=int(line) if line.isdigit() else None,
        details={"sites": [e["site"] for e in entries], "damage": damage})]


def _damage(records: list[dict[str, Any]], entries: list[dict[str, Any]]) -> str:
    from ddpcheck.run.checks._compare import first_mismatch, logs_by_rank

    seen_errors = set()
    for r in records:
        message = (r.get("error") or {}).get("message", "")
        for text, kind in ERRORS.items():
            if text in message:
                seen_errors.add(text)
    parts = []
    step, _at, _bad, _n = first_mismatch(logs_by_rank(records, "grads"))
    if step is not None:
        parts.append(f"gradients differed across ranks at optimizer step {step}")
    if seen_errors:
        parts.append("DDP raised \"" + "\" and \"".join(sorted(seen_errors)) + "\"")
    inside = {n for e in entries for n in e["params"]}
    seen = {n for r in records for n in r.get("probes", {}).get("lifecycle", {}).get("grad_seen", [])}
    if seen and inside - seen:
        names = sorted(inside - seen)
        parts.append("parameters inside the checkpoint never got a gradient ("
                     + ", ".join(names[:4]) + (f" +{len(names) - 4} more" if len(names) > 4 else "") + ")")
    return "; ".join(parts)


def _cause(entries: list[dict[str, Any]], section: dict[str, Any]) -> tuple[str, str]:
    if any(e["no_grad_input"] for e in entries):
        return ("None of the checkpointed function's inputs required grad, so the reentrant "
                "implementation computed no gradient for the parameters inside it, and DDP's "
                "reduction of that step never completed.",
                "Pass use_reentrant=False (works with DDP as is), or make an input require grad.")
    if any(e["repeated"] for e in entries):
        return ("The same parameters went through two reentrant backward passes in one step (the "
                "same module checkpointed twice), and DDP marks a parameter ready only once.",
                "Pass use_reentrant=False, or DDP(..., static_graph=True) if the graph is the same "
                "every step.")
    if section.get("find_unused_parameters"):
        return ("With find_unused_parameters=True DDP's graph walk after the forward cannot see the "
                "parameters inside a reentrant checkpoint, marks them unused, and then sees their "
                "gradients arrive.",
                "Pass use_reentrant=False, or static_graph=True instead of find_unused_parameters=True.")
    return ("Reentrant checkpointing re-runs the forward inside backward, which DDP's reducer does "
            "not expect.", "Pass use_reentrant=False.")


def _short(site: str) -> str:
    import os

    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else site


PROBE = Probe(PROBE_NAME, (ReentrantCheckpoint,), judge, capture, order=85)
