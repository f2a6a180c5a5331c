"""The process-group and DDP life cycle: init_process_group called, a DDP model made and its forward
called, one CUDA device per rank matching LOCAL_RANK, destroy_process_group before exit, and
parameters that never receive a gradient."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import socket

from ddpcheck.run.checks._compare import at_least, misaligned, misaligned_step
from ddpcheck.run.checks._replicas import reduced_by_hand, reduced_in_step, sharded_only
from ddpcheck.run.records import Record, node_of, section
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, plural
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck, verdicts_of

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim import Optimizer

    from ddpcheck.run.rank.session import Session


class InitProcessGroupMissing(RuntimeCheck):
    """The script ran on several ranks but never called `init_process_group`.

    ## Why it matters

    Launched by torchrun, each process only learns about the others through
    `torch.distributed.init_process_group()`. Without it there is no communication at all: every
    process trains its own model on its own data and the results are N unrelated runs.

    ## How to fix

    Call `torch.distributed.init_process_group()` once at start-up (torchrun provides the
    rendezvous through the environment), then wrap the model in `DistributedDataParallel`.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group
    """

    code = "DDP108"
    name = "init-process-group-missing"
    severity = Severity.ERROR
    # Without a process group nothing is sharded or synchronised: the data and gradient
    # findings that follow are this one's consequences, not faults of their own; and no rank waits
    # for another, so one rank's slower steps cost the others nothing (DDP140).
    explains = ("DDP100", "DDP101", "DDP102", "DDP103", "DDP104", "DDP105", "DDP106", "DDP107", "DDP111",
                "DDP115", "DDP140")
    INVALID = ("""
        model = Net()
        for x, y in loader:
            ...
    """,)
    VALID = ("""
        dist.init_process_group("gloo")
        model = DDP(Net())
        for x, y in loader:
            ...
    """,)


class DDPNotUsed(RuntimeCheck):
    """A process group exists but no DistributedDataParallel model was trained through.

    ## Why it matters

    DDP synchronises gradients inside the wrapper's forward and backward. A loop that calls the
    original module (`model(x)` instead of `ddp_model(x)`, or `ddp_model.module(x)`), or a script
    that never wraps the model, never all-reduces anything: every rank trains alone and the
    replicas drift apart from the first step. ddpcheck reports it once here; the gradient and
    parameter differences that follow from it are folded into this finding.

    ## How to fix

    Wrap the model once, `ddp_model = DDP(model)`, and call `ddp_model(x)` in the training loop.

    ## References

    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP109"
    name = "ddp-not-used"
    severity = Severity.ERROR
    explains = ("DDP105", "DDP106", "DDP107")
    INVALID = ("""
        ddp_model = DDP(model)
        for x, y in loader:
            loss = loss_fn(model(x), y)  # the unwrapped module
            loss.backward()
    """,)
    VALID = ("""
        ddp_model = DDP(model)
        for x, y in loader:
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
    """,)


class CudaDeviceMismatch(RuntimeCheck):
    """Several ranks on one machine put their DDP model on the same GPU.

    ## Why it matters

    Each rank needs its own GPU (`cuda:LOCAL_RANK`). Ranks that share one (a hard-coded
    `cuda:0`, or `set_device` never called) fight for its memory, run several times slower, and
    with NCCL may hang or fail with "Duplicate GPU detected".

    ## How to fix

    At start-up call `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` and build the model on
    that device; pass `device_ids=[local_rank]` to DDP.

    ## References

    - https://pytorch.org/docs/stable/elastic/run.html
    """

    code = "DDP110"
    needs = "ddp"
    name = "cuda-device-mismatch"
    severity = Severity.ERROR
    INVALID = ("""
        model = Net().cuda(0)
        ddp_model = DDP(model, device_ids=[0])
    """,)
    VALID = ("""
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        ddp_model = DDP(Net().cuda(local_rank), device_ids=[local_rank])
    """,)


class DestroyProcessGroupMissing(RuntimeCheck):
    """The script exits without calling `destroy_process_group()`.

    ## Why it matters

    Measured with torch 2.13 and gloo: without `destroy_process_group()` a rank dies of SIGABRT
    ("terminate called without an active exception") at interpreter exit in up to half of the
    runs, after training has finished, and torchrun then reports the whole job as failed. (Under
    ddpcheck the ranks exit through a path that avoids this, so the run itself is not affected.)

    ## How to fix

    Call `torch.distributed.destroy_process_group()` at the end of training, on every rank.

    ## References

    - https://pytorch.org/docs/stable/distributed.html#shutdown
    """

    code = "DDP111"
    needs = "init"
    name = "process-group-not-destroyed"
    severity = Severity.WARNING
    INVALID = ("""
        dist.init_process_group("gloo")
        train()
    """,)
    VALID = ("""
        dist.init_process_group("gloo")
        train()
        dist.destroy_process_group()
    """,)


class UnusedParameters(RuntimeCheck):
    """Parameters of the DDP model that never received a gradient on any rank.

    ## Why it matters

    Without `find_unused_parameters=True`, DDP fails at the next step when a parameter gets no
    gradient; with it, DDP walks the autograd graph every step to find them, which costs time.
    Parameters that are never used also cost memory and optimizer state. ddpcheck watches which
    parameters autograd accumulates a gradient into during the first checked steps.

    ## How to fix

    Remove the unused parameters, or freeze them (`p.requires_grad_(False)`) before wrapping the
    model in DDP; then `find_unused_parameters` can stay False.

    ## References

    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html
    """

    code = "DDP112"
    name = "unused-parameters"
    severity = Severity.WARNING
    INVALID = ("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
                self.aux_head = nn.Linear(8, 2)  # never called in forward
    """,)
    VALID = ("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(8, 8)
    """,)


NAME = "lifecycle"
# The probes whose verdicts say whether a script without DDP keeps its replicas in sync itself:
# asked through the registry by name, as a record's parts are, so no probe imports another.
GRADS, PARAMS = "grads", "params"
INIT, USED, DEVICE, DESTROY, UNUSED = InitProcessGroupMissing.code, DDPNotUsed.code, CudaDeviceMismatch.code, DestroyProcessGroupMissing.code, UnusedParameters.code


def capture(session: Session) -> None:
    from ddpcheck.run.rank import emulate

    section = session.section(NAME)
    section.update(init=False, backend=None, ddp=[], destroyed=False, ended=None,
                   host=socket.gethostname(), grad_seen=[])
    by_id: dict[int, dict[str, Any]] = {}
    seen: set[str] = set()
    handles: list[Any] = []

    def after_init() -> None:
        import torch.distributed as dist

        section["init"] = True
        section["backend"] = str(dist.get_backend())

    def on_ddp_init(ddp: DistributedDataParallel) -> None:
        params = [(n, p) for n, p in ddp.module.named_parameters() if p.requires_grad]
        first = next((p for _, p in params), None)
        entry = {
            "index": len(section["ddp"]),
            "params": [n for n, _ in params],
            "device": None if first is None else str(first.device),
            "device_ids": [str(d) for d in (ddp.device_ids or [])],
            "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", False)),
            "cuda_devices": _cuda_count(first),
            "gpu_uuid": _gpu_uuid(first),
            "forwards": 0,
        }
        meant = emulate.meant_device(ddp) if emulate.enabled() else None
        if meant is not None:  # CUDA emulated on the CPU: judge the GPU the script asked for
            entry.update(device=meant, cuda_devices=emulate.emulated_device_count(), emulated=True)
        section["ddp"].append(entry)
        by_id[id(ddp)] = entry
        for name, p in params:
            def mark(_tensor: Any, name: str = name) -> None:  # autograd accumulated into .grad
                seen.add(name)
            handles.append(p.register_post_accumulate_grad_hook(mark))

    def on_ddp_forward(ddp: DistributedDataParallel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        entry = by_id.get(id(ddp))
        if entry is not None:
            entry["forwards"] += 1

    def after_step(optimizer: Optimizer, step: int) -> None:
        section["grad_seen"] = sorted(seen)
        if step >= max(session.options.check_first, 1) and handles:
            for h in handles:  # bounded cost: watch the first K steps only
                h.remove()
            handles.clear()

    def at_end(why: str) -> None:
        section["ended"] = why
        section["destroyed"] = why == "destroy_process_group"
        section["grad_seen"] = sorted(seen)

    session.after_init.append(after_init)
    session.on_ddp_init.append(on_ddp_init)
    session.on_ddp_forward.append(on_ddp_forward)
    session.after_step.append(after_step)
    session.at_end.append(at_end)


def _cuda_count(param: Any) -> int:
    """How many GPUs this rank sees (0 for a CPU model; never initialises CUDA for one)."""
    if param is None or param.device.type != "cuda":
        return 0
    import torch

    return int(torch.cuda.device_count())


def _gpu_uuid(param: Any) -> str | None:
    """The physical GPU (cuda:0 is a different one on ranks with their own CUDA_VISIBLE_DEVICES)."""
    if param is None or param.device.type != "cuda":
        return None
    import torch

    try:
        return str(torch.cuda.get_device_properties(param.device).uuid)
    except (AttributeError, RuntimeError):
        return None


def _sections(records: list[Record]) -> dict[int, dict[str, Any]]:
    return {r["rank"]: r["probes"][NAME] for r in records if NAME in r.get("probes", {})}


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    secs = _sections(records)
    if not secs:
        why = "torch was never imported" if records else "no rank reported"
        return [Verdict(c, SKIP, why) for c in (INIT, USED, DEVICE, DESTROY, UNUSED)]
    out: list[Verdict] = []
    no_init = tuple(r for r, s in secs.items() if not s["init"])
    if ctx.world_size < 2:
        out.append(Verdict(INIT, SKIP, "one rank: nothing to synchronise"))
    elif no_init:
        out.append(Verdict(INIT, FAIL, f"init_process_group never called on {_ranks(no_init)}",
                           message=f"The script never called torch.distributed.init_process_group() "
                           f"on {_ranks(no_init)}: each of the {ctx.world_size} processes trained "
                           "alone, on its own copy of the model. Call it once at start-up, before "
                           "building DistributedDataParallel.", ranks=no_init))
    else:
        backends = sorted({s["backend"] for s in secs.values()})
        out.append(Verdict(INIT, PASS, f"called on every rank ({', '.join(map(str, backends))})"))

    initialised = [s for s in secs.values() if s["init"]]
    if not initialised:
        out.append(Verdict(USED, SKIP, "no process group"))
    else:
        no_ddp = tuple(r for r, s in secs.items() if not s["ddp"])
        # A rank the launcher stopped (after another rank's crash) never wrote its final record:
        # what it last wrote can predate its first forward, so its zero is unknown, not evidence.
        final = {r["rank"] for r in records if r.get("status") == "finished"}
        unused = tuple(r for r, s in secs.items()
                       if s["ddp"] and r in final and not any(d["forwards"] for d in s["ddp"]))
        by_hand = _synchronised_by_hand(records, ctx) if no_ddp and len(no_ddp) == len(secs) else None
        if by_hand is not None:
            out.append(Verdict(USED, PASS, f"no DistributedDataParallel model: {by_hand}"))
        elif no_ddp:
            out.append(Verdict(USED, FAIL, f"no DistributedDataParallel model on {_ranks(no_ddp)}",
                               message="No model was wrapped in DistributedDataParallel, so nothing "
                               "all-reduces the gradients: every rank trains its own model. Wrap "
                               "the model (`model = DDP(model)`) and train through the wrapper.",
                               ranks=no_ddp))
        elif unused:
            out.append(Verdict(USED, FAIL, "a DDP model was built but its forward was never called",
                               message="A DistributedDataParallel model was built, but its forward "
                               "was never called: the loop trains the unwrapped module, so gradients "
                               "are never all-reduced. Call the DDP wrapper (`ddp_model(x)`), not "
                               "`model(x)` / `ddp_model.module(x)`.", ranks=unused))
        else:
            n = sum(d["forwards"] for s in secs.values() for d in s["ddp"])
            if n:
                out.append(Verdict(USED, PASS, f"DDP forward called ({n} times over all ranks{at_least(records)})"))
            else:
                out.append(Verdict(USED, SKIP, "the ranks were stopped before their records showed a DDP forward"))

    out.append(_devices(secs, {r["rank"]: r.get("local_rank", 0) for r in records},
                        {r["rank"]: node_of(r) for r in records}))

    # Ranks that ended normally: a crashed rank's missing destroy is the crash's business.
    clean = {r["rank"] for r in records if r.get("status") == "finished" and not r.get("exit_code")}
    finished = {r: s for r, s in secs.items() if s.get("ended") and r in clean}
    not_destroyed = tuple(r for r, s in finished.items() if s["init"] and not s["destroyed"])
    if not finished:
        out.append(Verdict(DESTROY, SKIP, "no rank ended normally"))
    elif not any(s["init"] for s in finished.values()):
        out.append(Verdict(DESTROY, SKIP, "no process group"))
    elif not_destroyed:
        out.append(Verdict(DESTROY, FAIL, f"not called on {_ranks(not_destroyed)}",
                           message="destroy_process_group() was not called before exit on "
                           f"{_ranks(not_destroyed)}; with gloo/NCCL a rank can then abort at exit "
                           "and the launcher fails the whole job. Call "
                           "torch.distributed.destroy_process_group() at the end of training.",
                           ranks=not_destroyed, severity="warning"))
    else:
        out.append(Verdict(DESTROY, PASS, "called on every rank"))

    out.append(_unused(secs))
    return out


def _synchronised_by_hand(records: list[Record], ctx: Context) -> str | None:
    """How the script keeps its replicas in sync without DDP, when the run shows it does: its
    own collectives (at least one per optimizer step), gradients identical on every rank at the
    optimizer step (or reduced inside the optimizer's own step) and parameters identical after it."""
    if sharded_only(records, GRADS)[1]:
        return ("the parameters are sharded across the ranks (FSDP, DTensor), which reduces their "
                "gradients itself; each rank's shard is its own, so they are not compared")
    steps = min((int(r.get("step") or 0) for r in records), default=0)
    own = min((sum(int(g.get("entered", 0)) for g in section(r, "collectives").get("groups", {}).values())
               for r in records), default=0)
    if steps < 1 or own < steps:
        return None
    if misaligned_step(records) is not None:
        return (f"the script reduces with collectives of its own ({plural(own, 'collective')}); its replicas "
                f"were {misaligned(records)}")
    (g,) = verdicts_of(GRADS, records, ctx)
    p = verdicts_of(PARAMS, records, ctx)[0]
    if reduced_by_hand(records, GRADS) and FAIL in (g.status, p.status):
        # The script does reduce its gradients; where the result differs is DDP105's / DDP106's
        # finding, with the parameters named, not "nothing all-reduces".
        return (f"the script averages the gradients itself ({plural(own, 'collective')} of its own), "
                "but the replicas differ: see DDP105 and DDP106")
    if p.status != PASS or g.status == FAIL or (g.status == SKIP and not g.details.get("reduced_in_step")):
        return None
    if g.details.get("reduced_in_step"):
        kinds = ", ".join(reduced_in_step(records, GRADS)[1]) or "the optimizer"
        return (f"{kinds} reduces the gradients inside its step, and the parameters were identical on "
                f"every rank after it ({p.detail.removeprefix('identical on every rank after ')})")
    return (f"the script averages the gradients itself ({plural(own, 'collective')} of its own; gradients "
            f"{g.detail}, parameters identical after each checked step)")


def _devices(secs: dict[int, dict[str, Any]], local_ranks: dict[int, int], nodes: dict[int, int]) -> Verdict:
    first = {r: s["ddp"][0] for r, s in secs.items() if s["ddp"]}
    cuda = {r: d["device"] for r, d in first.items() if d["device"] and d["device"].startswith("cuda")}
    if not cuda:
        return Verdict(DEVICE, SKIP, "no CUDA model")
    wrong: list[tuple[int, str, str]] = []
    taken: dict[tuple[str, int, Any], int] = {}
    for rank, device in sorted(cuda.items()):
        index = int(device.split(":")[1]) if ":" in device else 0
        # cuda:0 of another node (another machine, or an emulated node of `--nodes`) is another GPU.
        key = (secs[rank]["host"], nodes.get(rank, 0), first[rank].get("gpu_uuid") or index)
        local = local_ranks.get(rank, 0)
        if key in taken:
            wrong.append((rank, device, f"shares {device} with rank {taken[key]}"))
        elif first[rank].get("cuda_devices", 0) > 1 and index != local:
            # (a rank that sees one GPU, through CUDA_VISIBLE_DEVICES, rightly uses cuda:0)
            wrong.append((rank, device, f"uses {device} but its LOCAL_RANK is {local}"))
        taken.setdefault(key, rank)
    if wrong:
        ranks = tuple(r for r, _, _ in wrong)
        what = "; ".join(f"rank {r} {why}" for r, _, why in wrong)
        return Verdict(DEVICE, FAIL, what, ranks=ranks,
                       message=f"Ranks are not on their own GPU ({what}). Call torch.cuda.set_device(LOCAL_RANK) "
                       "and build the model on cuda:LOCAL_RANK.", details={"devices": cuda})
    shown = ", ".join(f"rank {r}: {d}" for r, d in sorted(cuda.items()))
    emulated = " (emulated)" if any(first[r].get("emulated") for r in cuda) else ""
    return Verdict(DEVICE, PASS, f"one device per rank{emulated}: {shown}", details={"devices": cuda})


def _unused(secs: dict[int, dict[str, Any]]) -> Verdict:
    entries = [(s, d) for s in secs.values() for d in s["ddp"]]
    seen = {n for s in secs.values() for n in s.get("grad_seen", [])}
    if not entries or not seen:
        return Verdict(UNUSED, SKIP, "no backward through a DDP model seen")
    names = sorted({n for _, d in entries for n in d["params"]} - seen)
    if names:
        shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        return Verdict(UNUSED, FAIL, f"{len(names)} parameter(s) never got a gradient: {shown}",
                       message=f"Parameters never received a gradient on any rank: {shown}. They cost "
                       "memory and, with find_unused_parameters=True, a graph walk every step; "
                       "remove them or freeze them (requires_grad_(False)) before wrapping in DDP.",
                       severity="warning", details={"parameters": names})
    return Verdict(UNUSED, PASS, "every parameter received a gradient")


def _ranks(ranks: Iterable[int]) -> str:
    listed = tuple(ranks)
    return ("rank " if len(listed) == 1 else "ranks ") + ",".join(map(str, listed))


PROBE = Probe(NAME, (InitProcessGroupMissing, DDPNotUsed, CudaDeviceMismatch, DestroyProcessGroupMissing, UnusedParameters), judge, capture, order=20)
