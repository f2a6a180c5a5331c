"""Gradients identical on every rank at each checked optimizer step.

Captured in the global optimizer step pre-hook: it sees the final gradients, after DDP's
all-reduce and after any clipping or user edit, fires for every optimizer, and needs no DDP comm
hook (which would clash with the user's own and never fires under no_sync). Every parameter's
gradient is fingerprinted exactly (crc32 of its bytes; a None gradient is its own value). Under
DDP the all-reduced gradients are bitwise identical on every rank, so any difference is a fault.
"""

from __future__ import annotations

from ddpcheck.run.probes._compare import (
    DetailKeeper,
    describe_tensor,
    differing_tensors,
    first_mismatch,
    steps_by_rank,
)
from ddpcheck.run.session import SLOTS
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, describe_groups, odd_ranks

PROBE = "grads"
CODE = "DDP105"


def optimizer_params(optimizer):
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            yield f"param_groups[{gi}][{pi}]", p


def install(session) -> None:
    from ddpcheck.run.fingerprint import combine, tensor_crc

    section = session.section(PROBE)
    section["steps"] = []  # [step, digest, forwards since last step, of which under no_sync]
    keeper = DetailKeeper(session, section, 1 + SLOTS.index("grads"))
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
    per_rank = steps_by_rank(records, PROBE)
    if len(per_rank) < 2 or not any(per_rank.values()):
        return [Verdict(CODE, SKIP, "no optimizer step on two or more ranks")]
    step, at, bad, compared = first_mismatch(per_rank)
    if step is None:
        return [Verdict(CODE, PASS, f"identical on every rank at {compared} checked steps")]
    tensors = differing_tensors(records, PROBE, step)
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
        for s, _d, forwards, unsynced in r.get("probes", {}).get(PROBE, {}).get("steps", []):
            if s == step:
                windows.append((forwards, unsynced))
    if windows and all(f > 0 and u == f for f, u in windows):
        return ("Every DDP forward before this step ran inside no_sync(), so DDP never all-reduced "
                "these gradients: leave the last micro-batch of each step outside no_sync().")
    return ("After DDP's all-reduce every rank must hold the same gradients: something changed them "
            "on some ranks between backward() and optimizer.step() (a rank-dependent edit or scale, "
            "clipping by a rank-local value), or they were never all-reduced. Make every change to "
            ".grad the same on all ranks, or do it before backward.")
