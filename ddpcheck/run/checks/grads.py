"""Gradients identical on every rank at each checked optimizer step.

Captured in the global optimizer step pre-hook: it sees the final gradients, after DDP's
all-reduce and after any clipping or user edit, fires for every optimizer, and needs no DDP comm
hook (which would clash with the user's own and never fires under no_sync). Every parameter's
gradient is fingerprinted exactly (rank/fingerprint.py; a None gradient is its own value). Under
DDP the all-reduced gradients are bitwise identical on every rank, so any difference is a fault.

An optimizer that reduces the gradients inside its own step (a hand-written sharded optimizer
that all-reduces or reduce-scatters them there) holds each rank's local gradients when its step
starts: the reduction ends inside the step, so such a step's gradients are not compared here;
the parameters after it are (DDP106). Which steps did so is seen from the collectives the rank
entered between the step's pre- and post-hook (the collective ledger, rank/ledger.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpcheck.run.checks._compare import (
    StepLog,
    at_least,
    describe_tensor,
    differing_tensors,
    entries,
    first_mismatch,
    logs_by_rank,
    misaligned,
    realigned,
    where,
)
from ddpcheck.run.checks._replicas import (
    SHARDED,
    by_hand,
    note_sharded,
    optimizer_params,
    reduced_by_hand,
    reduced_in_step,
    sharded_only,
    synchronised,
)
from ddpcheck.run.records import Record
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, describe_groups, odd_ranks, plural
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session


class GradientsDiffer(RuntimeCheck):
    """Gradients differ across ranks at an optimizer step, after DDP's all-reduce.

    ## Why it matters

    DDP all-reduces gradients during backward, so at `optimizer.step()` every rank must hold
    bitwise the same gradients (measured with gloo: always identical). If they differ, the ranks
    apply different updates and the replicas drift apart silently. Causes: a rank-dependent edit
    or scaling of `.grad` after backward, clipping by a rank-local norm, `no_sync()` around every
    backward, or a model trained outside its DDP wrapper. ddpcheck fingerprints every gradient
    in the global optimizer step pre-hook and names the first step and the parameters that
    differ; a gradient that is None on some ranks only is reported too.

    Without the DDP wrapper (a loop of `dist.all_reduce(p.grad)` or a flat buffer reduced before
    `optimizer.step()`, ZeroRedundancyOptimizer) the reduction also ends before the step, so the
    same comparison applies: a parameter left out of the loop, or a division by the world size on
    some ranks only, is named here as the script's modules name it (`head.bias`). Sharded
    parameters (FSDP, sharded DTensors) hold a different part on each rank and are not compared.

    ## How the gradients are compared

    Each gradient's bytes are read as 64-bit words v_i and reduced where the gradient lives to two
    numbers, S = H + Σ v_i and W = Σ w_i·v_i (mod 2^64): H hashes the dtype and shape; the weights
    w_i are fixed pseudo-random 64-bit numbers (drawn once from a private generator with a fixed
    seed, never from the script's random state), one per run of 32 words (256 bytes) and one per
    position for the last < 32 words. That is one integer reduction over the tensor, at about the
    cost of `torch.sum`, and two numbers per gradient, which fold into one 64-bit digest per
    step; at each checked step one all-gather of a few such digests compares the ranks, and when
    they differ every rank keeps its per-gradient pairs, so the report names the parameters.

    When do two different gradients give the same pair? Let d_i be the difference of the words.
    A difference confined to one word (one or two neighbouring float32 values, one float64, up to
    four bf16 values, any bits flipped in them) always changes S. Otherwise both S and W must stay
    equal: Σ d_i ≡ 0 and Σ_r a_r·D_r ≡ 0 (mod 2^64), where D_r is the change of run r's sum. For
    random weights, a given pattern of run changes with some D_r ≢ 0 passes the second test with
    probability at most 2^-(64-k), k being the number of trailing zero bits all D_r share: 2^-64
    for ordinary differences, at most 2^-32 when only the upper float32 of each word differs, and
    1/2 in the extreme case of run changes confined to bit 63 (say, exactly two sign flips of
    odd-indexed float32 values in different runs). What it cannot see are changes that keep
    every run's sum: 64-bit words permuted within one 256-byte run, or equal and opposite changes
    inside one run. Values moved further, a transposed or shuffled tensor, a scale, noise, a
    skipped all-reduce, a gradient that is None on some ranks: each changes the pair.

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
    INVALID = ("""
        for x, y in loader:
            with ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()
            optimizer.step()
    """,)
    VALID = ("""
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accumulate == 0
            with contextlib.nullcontext() if last else ddp_model.no_sync():
                loss_fn(ddp_model(x), y).backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    """,)


NAME = "grads"
# Collectives that reduce data across ranks: one of these inside an optimizer step is a gradient
# reduction that ends there (a broadcast or all-gather of parameters is not).
REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
                      "all_to_all_single"})


def capture(session: Session) -> None:
    from ddpcheck.run.rank.fingerprint import combine, fingerprints

    from ddpcheck.run.rank.ledger import LEDGER

    # entries: [step, digest, forwards since the last step, of which under no_sync(),
    #           1 if the optimizer's step itself reduced across ranks]
    part = session.section(NAME)
    part["reduced_in_step"] = {"optimizers": [], "ops": []}
    part["by_hand"] = 0  # steps before which the script reduced the gradients itself (no DDP)
    log = StepLog(session, part, session.add_slot(NAME))
    reported: list[int] = []
    current: dict[str, Any] = {}

    def before_step(optimizer: Optimizer, step: int) -> None:
        named = synchronised(session, optimizer_params(optimizer))
        note_sharded(session, part, optimizer, named)
        fps = fingerprints(p.grad for _, p in named)
        digest = combine(fps)
        session.stage(NAME, digest)
        entry = [step, digest, session.forwards, session.unsynced, 0]
        sizes, LEDGER.reduced_sizes = LEDGER.reduced_sizes, []
        if not session.param_names and by_hand(sizes, [p.grad for _, p in named]):
            part["by_hand"] += 1
        log.add(entry, [n for n, _ in named], fps)
        current.update(entry=entry, entered={name: g.entered for name, g in LEDGER.groups.items()})

    def after_step(optimizer: Optimizer, step: int) -> None:
        entry, before = current.pop("entry", None), current.pop("entered", {})
        if entry is None or entry[0] != step:
            return
        ops = {call.op for name, g in LEDGER.groups.items() for call in g.recent
               if call.seq > before.get(name, 0) and not call.op.startswith("ddp.")}
        if ops & REDUCING:
            entry[4] = 1
            said = part["reduced_in_step"]
            said["ops"] = sorted(set(said["ops"]) | ops)
            kind = type(optimizer).__name__
            if kind not in said["optimizers"]:
                said["optimizers"].append(kind)

    def on_exchange(step: int, rows: list[list[int]]) -> None:
        if log.exchanged(step, rows) and not reported:
            reported.append(step)
            session.progress(f"gradients differ across ranks at optimizer step {step}")

    session.before_step.append(before_step)
    session.after_step.insert(0, after_step)
    session.on_exchange.append(on_exchange)


def _without(logs: dict[int, dict[str, Any]], steps: set[int]) -> dict[int, dict[str, Any]]:
    """The logs without the given steps (and without the rolling digest, which covers them)."""
    out = {}
    for rank, log in logs.items():
        kept = [e for e in log.get("steps", []) if int(e[0]) not in steps]
        out[rank] = {**log, "steps": kept, "differ": [e for e in log.get("differ", []) if int(e[0]) not in steps],
                     "count": len(kept), "rolling": 0, "differing": 0}
    return out


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    logs = logs_by_rank(records, NAME)
    if len(logs) < 2 or not any(log.get("count") for log in logs.values()):
        return [Verdict(GradientsDiffer.code, SKIP, misaligned(records) or "no optimizer step on two or more ranks")]
    sharded, only = sharded_only(records, NAME)
    if only:
        return [Verdict(GradientsDiffer.code, SKIP, f"{plural(sharded, 'sharded parameter')}: {SHARDED}",
                        details={"sharded": sharded})]
    step, at, bad, compared = first_mismatch(logs)
    if step is None:
        left = f"; {plural(sharded, 'sharded parameter')} not compared" if sharded else ""
        return [Verdict(GradientsDiffer.code, PASS, f"identical on every rank at {plural(compared, 'checked step')}"
                        f"{realigned(records)}{left}{at_least(records)}")]
    inside, kinds = reduced_in_step(records, NAME)
    if inside and (step in inside or step == -1):
        # The gradients differ where the optimizer's own step reduces them: judge the other steps.
        how = (f"{', '.join(kinds) or 'the optimizer'} reduces the gradients inside its step "
               f"({plural(len(inside), 'checked step')}): compared through the parameters after it (DDP106)")
        logs = _without(logs, inside)
        if not any(log["steps"] for log in logs.values()):
            return [Verdict(GradientsDiffer.code, SKIP, how, details={"reduced_in_step": sorted(inside)})]
        step, at, bad, compared = first_mismatch(logs)
        if step is None:
            return [Verdict(GradientsDiffer.code, PASS, f"identical on every rank at {plural(compared, 'checked step')}; {how}"
                            f"{at_least(records)}",
                            details={"reduced_in_step": sorted(inside)})]
    tensors = differing_tensors(logs, step)
    names = ", ".join(describe_tensor(n, v) for n, v in (tensors or [])[:5])
    if tensors and len(tensors) > 5:
        names += f" (+{len(tensors) - 5} more)"
    cause = _cause(logs, step, reduced_by_hand(records, NAME))
    message = (f"Gradients differ across ranks at {where(step)} ({describe_groups(at)}; "
               f"{bad} of {plural(compared, 'checked step')} differ){': ' + names if names else ''}. "
               + cause)
    return [Verdict(GradientsDiffer.code, FAIL, f"differ from step {step}: {names or describe_groups(at)}",
                    message=message, ranks=odd_ranks(at), step=step if step > 0 else None,
                    details={"differing_steps": bad, "checked_steps": compared,
                             "parameters": [n for n, _ in (tensors or [])], "digests": at})]


def _cause(logs: dict[int, dict[str, Any]], step: int, hand: bool) -> str:
    if hand:
        return ("The script averages the gradients itself, without the DDP wrapper, so at optimizer.step() "
                "every rank must hold the same averaged gradients: the ones named were not all-reduced "
                "(a parameter left out of the loop or the flat buffer), or were divided or edited on "
                "some ranks only. Reduce every parameter's gradient and divide it by the world size "
                "on every rank, or wrap the model in DistributedDataParallel.")
    windows = [(e[2], e[3]) for log in logs.values() for s, e in entries(log).items() if s == step]
    if windows and all(f > 0 and u == f for f, u in windows):
        return ("Every DDP forward before this step ran inside no_sync(), so DDP never all-reduced "
                "these gradients: leave the last micro-batch of each step outside no_sync().")
    return ("After DDP's all-reduce every rank must hold the same gradients: something changed them "
            "on some ranks between backward() and optimizer.step() (a rank-dependent edit or scale, "
            "clipping by a rank-local value), or they were never all-reduced. Make every change to "
            ".grad the same on all ranks, or do it before backward.")


PROBE = Probe(NAME, (GradientsDiffer,), judge, capture, order=60)
