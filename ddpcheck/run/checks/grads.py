"""Gradients identical on every rank at each checked optimizer step.

Captured in the global optimizer step pre-hook: it sees the final gradients, after DDP's
all-reduce and after any clipping or user edit, fires for every optimizer, and needs no DDP comm
hook (which would clash with the user's own and never fires under no_sync). Every parameter's
gradient is fingerprinted exactly (crc32 of its bytes; a None gradient is its own value). Under
DDP the all-reduced gradients are bitwise identical on every rank, so any difference is a fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpcheck.run.checks._compare import (
    DetailKeeper,
    describe_tensor,
    differing_tensors,
    first_mismatch,
    steps_by_rank,
)
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, describe_groups, odd_ranks
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session


class GradientsDiffer(RuntimeCheck):
    """Gradients differ across ranks at an optimizer step, after DDP's all-reduce.

    ## Why it matters

    DDP all-reduces gradients during backward, so at `optimizer.step()` every rank must hold
    bitwise the same gradients (measured with gloo: always identical). If they differ, the ranks
    apply different updates and the replicas drift apart silently. Causes: a rank-dependent edit
    or scaling of `.grad` after backward, clipping by a rank-local norm, `no_sync()` around every
    backward, or a model trained outside its DDP wrapper. ddpcheck fingerprints every gradient
    (crc32 of its bytes) in the global optimizer step pre-hook and names the first step and the
    parameters that differ; a gradient that is None on some ranks only is reported too.

    ## How to fix

    Make every change to `.grad` identical on all ranks (or do it before backward), and let the last
    micro-batch of each accumulation window run outside `no_sync()`.

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync
    """

    code = "DDP105"
    name = "gradients-differ"
    severity = Severity.ERROR
    explains = ("DDP106",)
    BAD = """
        for x, y in loader:
            with ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()
            optimizer.step()
    """
    GOOD = """
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accumulate == 0
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    """


NAME = "grads"
CODE = "DDP105"


def optimizer_params(optimizer):
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            yield f"param_groups[{gi}][{pi}]", p


def capture(session: Session) -> None:
    from ddpcheck.run.rank.fingerprint import combine, tensor_crc

    section = session.section(NAME)
    section["steps"] = []  # [step, digest, forwards since last step, of which under no_sync]
    keeper = DetailKeeper(session, section, session.add_slot("grads"))
    state = {"reported": False}

    def before_step(optimizer, step: int) -> None:
        named = [(session.name_of(p, fallback), p) for fallback, p in optimizer_params(optimizer)]
        crcs = [tensor_crc(p.grad) for _, p in named]
        digest = combine(crcs)
        session.stage("grads", digest)
        section["steps"].append([step, digest, session.window["forwards"], session.window["unsynced"]])
        keeper.hold(step, [n for n, _ in named], crcs)

    def on_exchange(step: int, rows) -> None:
        if keeper.exchanged(step, rows) and not state["reported"]:
            state["reported"] = True
            session.progress(f"gradients differ across ranks at optimizer step {step}")

    session.before_step.append(before_step)
    session.on_exchange.append(on_exchange)


def judge(records: list[dict], ctx: Context) -> list[Verdict]:
    per_rank = steps_by_rank(records, NAME)
    if len(per_rank) < 2 or not any(per_rank.values()):
        return [Verdict(CODE, SKIP, "no optimizer step on two or more ranks")]
    step, at, bad, compared = first_mismatch(per_rank)
    if step is None:
        return [Verdict(CODE, PASS, f"identical on every rank at {compared} checked steps")]
    tensors = differing_tensors(records, NAME, step)
    names = ", ".join(describe_tensor(n, v) for n, v in (tensors or [])[:5])
    if tensors and len(tensors) > 5:
        names += f" (+{len(tensors) - 5} more)"
    cause = _cause(records, step)
    message = (f"Gradients differ across ranks at optimizer step {step} ({describe_groups(at)}; "
               f"{bad} of {compared} checked steps differ){': ' + names if names else ''}. "
               + cause)
    return [Verdict(CODE, FAIL, f"differ from step {step}: {names or describe_groups(at)}",
                    message=message, ranks=odd_ranks(at), step=step,
                    details={"differing_steps": bad, "checked_steps": compared,
                             "parameters": [n for n, _ in (tensors or [])], "digests": at})]


def _cause(records: list[dict], step: int) -> str:
    windows = []
    for r in records:
        for s, _d, forwards, unsynced in r.get("probes", {}).get(NAME, {}).get("steps", []):
            if s == step:
                windows.append((forwards, unsynced))
    if windows and all(f > 0 and u == f for f, u in windows):
        return ("Every DDP forward before this step ran inside no_sync(), so DDP never all-reduced "
                "these gradients: leave the last micro-batch of each step outside no_sync().")
    return ("After DDP's all-reduce every rank must hold the same gradients: something changed them "
            "on some ranks between backward() and optimizer.step() (a rank-dependent edit or scale, "
            "clipping by a rank-local value), or they were never all-reduced. Make every change to "
            ".grad the same on all ranks, or do it before backward.")


PROBE = Probe(NAME, (GradientsDiffer,), judge, capture, order=60)
