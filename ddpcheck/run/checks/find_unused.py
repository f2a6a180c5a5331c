"""`find_unused_parameters`, both ways.

- With `find_unused_parameters=True`, DDP walks the autograd graph from the forward's outputs after
  every forward (`DDP._post_forward` → `reducer.prepare_for_backward(outputs)`) to find the
  parameters that will get no gradient. The walk is timed here, and during the first checked steps
  post-accumulate-grad hooks note whether every parameter got a gradient in every step. If they
  all did on every rank, the flag bought nothing.
- Without it, a parameter that gets no gradient leaves DDP's reduction unfinished, and the next
  forward raises "Expected to have finished reduction in the prior iteration before starting a
  new one" with the parameters' *indices*. The probe catches that error on its way out of
  `DDP._pre_forward` and records the parameters' names (DDP numbers the parameters that require
  grad, module by module, shared ones once, leaving out `parameters_to_ignore`).
"""

from __future__ import annotations

import re
import statistics
from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session

PROBE_NAME = "find-unused"
UNFINISHED = "Expected to have finished reduction in the prior iteration"
_INDICES = re.compile(r"Parameter indices which did not receive grad for rank (\d+):\s*([\d ]+)")
MIN_STEPS = 2  # steps every rank must have watched before the flag is called unneeded


class FindUnusedParametersUnneeded(RuntimeCheck):
    """`find_unused_parameters=True`, but every parameter got a gradient in every step.

    ## Why it matters

    With `find_unused_parameters=True`, DDP walks the autograd graph from the forward's outputs
    after every forward (`DistributedDataParallel._post_forward` calls
    `reducer.prepare_for_backward(outputs)`) to find parameters that will get no gradient, and its
    reducer keeps track of them during backward. When every parameter takes part in every step
    this is work for nothing. ddpcheck watches, during the first checked steps, whether each
    parameter of the DDP model received a gradient in each step on each rank, and times the walk;
    the finding gives its measured cost per forward and its share of the median step.

    ## How to fix

    Drop the flag (`find_unused_parameters=False` is the default). If some parameters are unused
    in every step, freeze or remove them instead; keep the flag only when the set of used
    parameters changes from step to step.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP144"
    hint = "drop find_unused_parameters=True"
    name = "find-unused-walk-for-nothing"
    severity = Severity.WARNING
    INVALID = ("""
        model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)  # all params used
    """,)
    VALID = ("""
        model = DDP(model, device_ids=[local_rank])
    """,)


class UnfinishedReduction(RuntimeCheck):
    """DDP failed with "Expected to have finished reduction in the prior iteration": the parameters
    that got no gradient, by name.

    ## Why it matters

    Without `find_unused_parameters=True`, DDP waits for a gradient of every parameter in each
    backward before it all-reduces the last bucket. A parameter the loss does not depend on (an
    auxiliary head, a branch taken only sometimes, a frozen-by-accident layer) leaves the reduction
    unfinished, and the next forward raises this error. DDP's message lists the parameters by
    *index* only (names need `TORCH_DISTRIBUTED_DEBUG=INFO` and a rerun); ddpcheck maps the
    indices to names in DDP's own order on the spot.

    ## How to fix

    Make the named parameters take part in the loss, or remove them, or freeze them
    (`requires_grad_(False)`) before wrapping the model in DDP. If they are used in some steps and
    not in others, pass `find_unused_parameters=True`.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP146"
    hint = "use the named parameters in the loss, freeze or remove them, or find_unused_parameters=True"
    name = "unfinished-reduction"
    severity = Severity.ERROR
    # The step whose reduction never completed left the other gradients unsynchronised (and the
    # parameters then drift); the parameters without a gradient; the crash it is.
    explains = ("DDP105", "DDP106", "DDP112", "DDP120")
    INVALID = ("""
        def forward(self, x):
            features = self.backbone(x)
            return self.head(features), self.aux_head(features.detach())  # aux loss never computed
    """,)
    VALID = ("""
        def forward(self, x):
            return self.head(self.backbone(x))  # aux_head removed (or passed to the loss)
    """,)


def reducer_parameter_names(ddp: DistributedDataParallel) -> list[str]:
    """The names of the parameters in the order DDP's reducer numbers them."""
    ignore = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    names, memo = [], set()
    for module_name, module in ddp.module.named_modules():
        for param_name, p in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            if not p.requires_grad or full in ignore or id(p) in memo:
                continue
            memo.add(id(p))
            names.append(full)
    return names


def names_from_error(message: str, names: list[str]) -> list[str]:
    match = _INDICES.search(message)
    if not match:
        return []
    out = []
    for token in match.group(2).split():
        i = int(token)
        out.append(names[i] if 0 <= i < len(names) else f"parameter #{i}")
    return out


def capture(session: "Session") -> None:
    import time

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    section = session.section(PROBE_NAME)
    section.update(models=[], unfinished=None)
    walks: list[float] = []
    entries: dict[int, dict[str, Any]] = {}

    original_pre: Any = DDP._pre_forward
    original_post: Any = DDP._post_forward

    def _pre_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original_pre(self, *args, **kwargs)
        except RuntimeError as exc:
            if UNFINISHED in str(exc) and section["unfinished"] is None:
                names = reducer_parameter_names(self)
                section["unfinished"] = {
                    "step": session.step, "parameters": names_from_error(str(exc), names)[:100],
                    "find_unused_parameters": bool(self.find_unused_parameters),
                }
                session.flush(force=True)
            raise

    def _post_forward(self: Any, output: Any) -> Any:
        entry = entries.get(id(self))
        if entry is None or not (self.find_unused_parameters and torch.is_grad_enabled()):
            return original_post(self, output)
        start = time.perf_counter()
        try:
            return original_post(self, output)
        finally:
            if len(walks) < 4096:
                walks.append(time.perf_counter() - start)

    setattr(DDP, "_pre_forward", _pre_forward)
    setattr(DDP, "_post_forward", _post_forward)

    def on_ddp_init(ddp: DistributedDataParallel) -> None:
        fup = bool(getattr(ddp, "find_unused_parameters", False))
        entry = {"find_unused_parameters": fup, "static_graph": bool(getattr(ddp, "static_graph", False)),
                 "params": 0, "steps": 0, "incomplete_steps": 0, "missing": [], "walk_median_s": None,
                 "walks": 0}
        if len(section["models"]) >= 8:
            return
        section["models"].append(entry)
        entries[id(ddp)] = entry
        if fup:
            _watch_every_grad(session, entry, ddp)

    def summarise(*_args: Any) -> None:
        if walks:
            for entry in entries.values():
                if entry["find_unused_parameters"]:
                    entry["walk_median_s"] = statistics.median(walks)
                    entry["walks"] = len(walks)

    session.on_ddp_init.append(on_ddp_init)
    session.after_step.append(summarise)
    session.at_end.append(summarise)


def _watch_every_grad(session: "Session", entry: dict[str, Any], ddp: Any) -> None:
    """Per step: did every parameter get a gradient? (post-accumulate-grad hooks fire for this
    rank's own backward; DDP marking a parameter unused does not fire them.) First K steps only."""
    params = [(n, p) for n, p in ddp.module.named_parameters() if p.requires_grad]
    entry["params"] = len(params)
    seen: set[str] = set()
    handles = []
    for name, p in params:
        def mark(_tensor: Any, name: str = name) -> None:
            seen.add(name)
        handles.append(p.register_post_accumulate_grad_hook(mark))

    def after_step(optimizer: Optimizer, step: int) -> None:
        if not handles:
            return
        if seen:  # a window with a backward through this model
            entry["steps"] += 1
            missing = [n for n, _ in params if n not in seen]
            if missing:
                entry["incomplete_steps"] += 1
                entry["missing"] = sorted(set(entry["missing"]) | set(missing))[:50]
            seen.clear()
        if step >= max(session.options.check_first, 1):
            for h in handles:
                h.remove()
            handles.clear()

    session.after_step.append(after_step)


UNNEEDED, CRASH = FindUnusedParametersUnneeded.code, UnfinishedReduction.code


def judge(records: list[dict[str, Any]], ctx: Context) -> list[Verdict]:
    sections = {r["rank"]: r["probes"][PROBE_NAME] for r in records if PROBE_NAME in r.get("probes", {})}
    if not sections:
        return [Verdict(UNNEEDED, SKIP, "no DDP model"), Verdict(CRASH, SKIP, "no DDP model")]
    return [_unneeded(records, sections), _crash(sections)]


def _crash(sections: dict[int, dict[str, Any]]) -> Verdict:
    hit = {r: s["unfinished"] for r, s in sections.items() if s.get("unfinished")}
    if not hit:
        return Verdict(CRASH, SKIP, "DDP's reduction always finished")
    rank, first = min(hit.items())
    names = first["parameters"]
    shown = ", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else "")
    after = first["step"]
    when = f"after optimizer step {after}" if after else "at the second forward"
    what = f": {shown}" if names else " (DDP did not list them)"
    return Verdict(
        CRASH, FAIL, f"no gradient for {len(names) or 'some'} parameter(s){what}",
        message=(f"DDP stopped {when} with \"Expected to have finished reduction in the prior "
                 f"iteration\": these parameters got no gradient in the previous iteration on rank "
                 f"{rank}{what}. Make them take part in the loss, remove them or freeze them "
                 "(requires_grad_(False)) before wrapping the model, or pass "
                 "find_unused_parameters=True if they are unused only in some steps."),
        ranks=tuple(sorted(hit)), step=after + 1,
        details={"parameters": names})


def _unneeded(records: list[dict[str, Any]], sections: dict[int, dict[str, Any]]) -> Verdict:
    fup = {r: [m for m in s.get("models", []) if m["find_unused_parameters"]] for r, s in sections.items()}
    fup = {r: ms for r, ms in fup.items() if ms}
    if not fup:
        return Verdict(UNNEEDED, SKIP, "find_unused_parameters is not set")
    models = [m for ms in fup.values() for m in ms]
    if any(m["incomplete_steps"] for m in models):
        n = max(m["incomplete_steps"] for m in models)
        missing = sorted({x for m in models for x in m["missing"]})
        return Verdict(UNNEEDED, PASS, f"needed: {n} step(s) had parameters without a gradient "
                       f"({', '.join(missing[:3])})")
    if min(m["steps"] for m in models) < MIN_STEPS:
        return Verdict(UNNEEDED, SKIP, "too few steps watched to tell")
    steps = min(m["steps"] for m in models)
    walk = [m["walk_median_s"] for m in models if m.get("walk_median_s") is not None]
    walk_s = statistics.median(walk) if walk else None
    share = _share_of_step(records, walk_s)
    cost = ""
    if walk_s is not None:
        cost = f" It took {walk_s * 1e3:.2f} ms after each forward"
        cost += f", {share:.1%} of the median step." if share is not None else "."
    return Verdict(
        UNNEEDED, FAIL,
        f"every parameter got a gradient in all {steps} watched steps"
        + (f"; graph walk {walk_s * 1e3:.2f} ms per forward" if walk_s is not None else ""),
        message=("find_unused_parameters=True, but every parameter received a gradient in every one "
                 f"of the {steps} steps watched on every rank: DDP walks the autograd graph after "
                 "each forward for nothing."
                 f"{cost} Pass find_unused_parameters=False (the default)."),
        severity="warning", details={"steps": steps, "walk_s": walk_s, "share": share})


def _share_of_step(records: list[dict[str, Any]], walk_s: float | None) -> float | None:
    """The graph walk as a share of the median step, when the timing probe measured steps."""
    if walk_s is None:
        return None
    from ddpcheck.run import performance

    perf = performance.summarise(records)
    if not perf or not perf.get("step_median"):
        return None
    return float(walk_s / perf["step_median"])


PROBE = Probe(PROBE_NAME, (FindUnusedParametersUnneeded, UnfinishedReduction), judge, capture, order=80)
