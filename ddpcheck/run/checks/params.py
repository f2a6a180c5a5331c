"""Parameters and buffers identical on every rank: after each checked optimizer step (the global
post-step hook), and at the end of the run (at destroy_process_group, or at exit).

Buffers are compared at the forward of DDP models built with broadcast_buffers=False (with the
default True, DDP copies rank 0's buffers at every forward, and BatchNorm statistics legitimately
differ between forwards).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.run.checks._compare import (
    StepLog,
    at_least,
    describe_tensor,
    differing_tensors,
    first_mismatch,
    logs_by_rank,
    misaligned,
    misaligned_step,
    realigned,
    where,
)
from ddpcheck.run.checks._replicas import SHARDED, by_hand, note_sharded, optimizer_params, sharded_only, synchronised
from ddpcheck.run.records import Record, section
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, describe_groups, odd_ranks, plural
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session


class ParametersDiverge(RuntimeCheck):
    """Model parameters differ across ranks after an optimizer step or at the end of the run.

    ## Why it matters

    DDP keeps replicas identical only if every rank applies the same update. A weight edited on
    some ranks only (outside the optimizer, e.g. `if rank == 0: p.add_(...)`, a rank-local EMA or
    target-network update written into the model) makes the replicas drift; the checkpoint saved
    on rank 0 then is not what the other ranks trained. ddpcheck fingerprints the parameters after
    checked steps (global optimizer post-step hook) and at the end. Once a DDP model exists, only
    its parameters are compared: others the optimizer updates may differ per rank by design
    (model-parallel embedding tables, as in DLRM).

    ## How to fix

    Change weights only through the optimizer, identically on every rank; if one rank must edit
    them, broadcast them from that rank afterwards (`dist.broadcast(p, src=0)`).

    ## References

    - https://pytorch.org/docs/stable/notes/ddp.html
    """

    code = "DDP106"
    name = "parameters-diverge"
    severity = Severity.ERROR
    INVALID = ("""
        optimizer.step()
        if dist.get_rank() == 0:
            with torch.no_grad():
                model.head.bias.add_(0.01)
    """,)
    VALID = ("""
        optimizer.step()
        with torch.no_grad():
            model.head.bias.add_(0.01)  # the same edit on every rank
    """,)


class BuffersDiverge(RuntimeCheck):
    """Module buffers differ across ranks at a forward, and DDP does not broadcast them.

    ## Why it matters

    With `broadcast_buffers=False` (`forward_sync_buffers=False` from torch 2.13), DDP leaves buffers (BatchNorm statistics, masks, EMA state)
    alone, so rank-local updates make the ranks run different models, and evaluation on rank 0
    uses statistics the others never had. With the default `broadcast_buffers=True`, DDP copies
    rank 0's buffers at every forward and this check does not apply.

    ## How to fix

    Keep `broadcast_buffers=True`, convert BatchNorm with `nn.SyncBatchNorm.convert_sync_batchnorm`,
    or all-reduce the buffers yourself before they are used.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP107"
    name = "buffers-diverge"
    severity = Severity.ERROR
    INVALID = ("""
        model = DDP(model, broadcast_buffers=False)
        if dist.get_rank() == 0:
            model.module.mask.fill_(0)
    """,)
    VALID = ("""
        model = DDP(model)  # broadcast_buffers=True: rank 0's buffers at every forward
    """,)


NAME = "params"
PARAMS, BUFFERS = ParametersDiverge.code, BuffersDiverge.code


def capture(session: Session) -> None:
    import weakref

    from ddpcheck.run.rank.fingerprint import combine, fingerprints

    part = session.section(NAME)
    part["end"] = None
    params = StepLog(session, part, session.add_slot(NAME))
    buffers = StepLog(session, part, session.add_slot("buffers"), key="buffers")
    optimizers: list[Any] = []
    reported: list[int] = []
    buffer_window = [0]

    def after_step(optimizer: Optimizer, step: int) -> None:
        if not any(ref() is optimizer for ref in optimizers):
            optimizers.append(weakref.ref(optimizer))
        named = synchronised(session, optimizer_params(optimizer))
        note_sharded(session, part, optimizer, named)
        fps = fingerprints(p for _, p in named)
        digest = combine(fps)
        session.stage(NAME, digest)
        params.add([step, digest], [n for n, _ in named], fps)

    def on_ddp_forward(ddp: DistributedDataParallel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        step = session.step + 1
        if step != session.next_checked or buffer_window[0] == step:
            return
        # forward_sync_buffers (torch >= 2.13) is what broadcast_buffers was
        if getattr(ddp, "forward_sync_buffers", getattr(ddp, "broadcast_buffers", True)):
            return
        buffer_window[0] = step
        named = list(ddp.module.named_buffers())
        if not named:
            return
        fps = fingerprints(b for _, b in named)
        digest = combine(fps)
        session.stage("buffers", digest)
        buffers.add([step, digest], [n for n, _ in named], fps)

    def on_exchange(step: int, rows: list[list[int]]) -> None:
        buffers.exchanged(step, rows)
        if params.exchanged(step, rows) and not reported:
            reported.append(step)
            session.progress(f"parameters differ across ranks after optimizer step {step}")

    def at_end(why: str) -> None:
        named: dict[str, Any] = {}
        for ddp in session.ddps():
            for n, p in ddp.module.named_parameters():
                named.setdefault(n, p)
        for opt in (ref() for ref in optimizers):
            if opt is not None:
                for n, p in synchronised(session, optimizer_params(opt)):
                    named.setdefault(n, p)
        by_hand = False
        if not named and why == "destroy_process_group":
            named, by_hand = _updated_by_hand()
        names = sorted(named)
        fps = fingerprints(named[n] for n in names)
        part["end"] = {"names": names, "fingerprints": [list(f) for f in fps], "digest": combine(fps),
                       "why": why, "step": session.step, "by_hand": by_hand}

    session.after_step.append(after_step)
    session.on_ddp_forward.append(on_ddp_forward)
    session.on_exchange.append(on_exchange)
    session.at_end.append(at_end)


def _updated_by_hand() -> tuple[dict[str, Any], bool]:
    """With neither a DDP model nor an optimizer step, the parameters of the modules the code that
    ends the process group holds, when the script all-reduced tensors the size of them (it
    averaged their gradients itself and updated them in place): compared once, at the end."""
    import sys

    from ddpcheck.run.rank import param_names
    from ddpcheck.run.rank.ledger import LEDGER

    named: dict[str, Any] = {}
    for module in param_names.modules_in(sys._getframe(1)):
        for n, p in module.named_parameters():
            if p.requires_grad and not param_names.sharded(p):
                named.setdefault(n.replace("_orig_mod.", ""), p)
    if not named or not by_hand(LEDGER.reduced_sizes, list(named.values())):
        return {}, False
    return named, True


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    return [_params(records), _buffers(records)]


def _params(records: list[Record]) -> Verdict:
    logs = logs_by_rank(records, NAME)
    ends = {int(r["rank"]): section(r, NAME)["end"] for r in records
            if (section(r, NAME).get("end") or {}).get("names")}  # parameters to compare at the end
    if misaligned_step(records) is not None:
        ends = {}  # the ranks' last steps are not the same point of training either
    if len(logs) < 2 or (not any(log.get("count") for log in logs.values()) and len(ends) < 2):
        return Verdict(PARAMS, SKIP, misaligned(records) or "no optimizer step on two or more ranks")
    sharded, only = sharded_only(records, NAME)
    if only:
        return Verdict(PARAMS, SKIP, f"{plural(sharded, 'sharded parameter')}: {SHARDED}",
                       details={"sharded": sharded})
    step, at, bad, compared = first_mismatch(logs)
    # No optimizer step: the parameters the script updated itself, compared once at the end.
    hand = not compared and all(e.get("by_hand") for e in ends.values())
    if step is not None:
        tensors = differing_tensors(logs, step) or []
        shown = ", ".join(describe_tensor(n, v) for n, v in tensors[:5])
        return Verdict(PARAMS, FAIL, f"differ after step {step}: {shown or describe_groups(at)}",
                       message=f"Parameters differ across ranks after {where(step)} "
                       f"({describe_groups(at)}){': ' + shown if shown else ''}. The replicas have "
                       "drifted apart: something updates weights on some ranks only (a rank-local "
                       "edit, an update outside the optimizer, different gradients). Change weights "
                       "only through the optimizer, identically on every rank, or broadcast them "
                       "from rank 0 after the edit.", ranks=odd_ranks(at), step=step if step > 0 else None,
                       details={"differing_steps": bad, "checked_steps": compared,
                                "parameters": [n for n, _ in tensors]})
    if len(ends) >= 2 and len({e["digest"] for e in ends.values()}) > 1:
        digests = {r: e["digest"] for r, e in ends.items()}
        first = next(iter(ends.values()))
        names = [n for i, n in enumerate(first["names"])
                 if len({tuple(e["fingerprints"][i]) for e in ends.values() if i < len(e["fingerprints"])}) > 1]
        shown = ", ".join(names[:5])
        return Verdict(PARAMS, FAIL, f"differ at the end of the run: {shown or describe_groups(digests)}",
                       message=f"Parameters differ across ranks at the end of the run "
                       f"({describe_groups(digests)}){': ' + shown if shown else ''}"
                       + (". The script updates them itself after averaging the gradients by hand, "
                          "with no optimizer step to compare at: some gradient was not all-reduced, "
                          "or some rank changed a weight or a gradient on its own. "
                          if hand else ", although they matched at every checked step: something "
                          "changed them on some ranks after the last checked step. ")
                       + "Change weights identically on every rank.",
                       ranks=odd_ranks(digests), details={"parameters": names, "at_end": hand})
    if hand:
        return Verdict(PARAMS, PASS, "identical on every rank at the end of the run (updated in place by the "
                       "script, no optimizer step to compare at)", details={"at_end": True})
    when = plural(compared, "checked step") + (" and at the end" if len(ends) >= 2 else "")
    return Verdict(PARAMS, PASS, f"identical on every rank after {when}{realigned(records)}{at_least(records)}")


def _buffers(records: list[Record]) -> Verdict:
    logs = logs_by_rank(records, NAME, key="buffers")
    if len(logs) < 2 or not all(log.get("count") for log in logs.values()):
        return Verdict(BUFFERS, SKIP, "DDP broadcasts buffers (broadcast_buffers=True) or no buffers")
    step, at, bad, compared = first_mismatch(logs)
    if step is None:
        return Verdict(BUFFERS, PASS, f"identical at {plural(compared, 'checked forward')}")
    tensors = differing_tensors(logs, step) or []
    names = ", ".join(n for n, _ in tensors[:5])
    return Verdict(BUFFERS, FAIL, f"differ at the forward of step {step}: {names or describe_groups(at)}",
                   message=f"Module buffers differ across ranks at the forward of {where(step)} "
                   f"({describe_groups(at)}){': ' + names if names else ''}, and DDP does not "
                   "broadcast them (broadcast_buffers=False): ranks run different models. Keep "
                   "broadcast_buffers=True, use SyncBatchNorm, or sync the buffers yourself.",
                   ranks=odd_ranks(at), step=step if step > 0 else None,
                   details={"buffers": [n for n, _ in tensors]})


PROBE = Probe(NAME, (ParametersDiverge, BuffersDiverge), judge, capture, order=70)
