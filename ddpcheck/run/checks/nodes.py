"""What a job of several nodes does differently from one: a device index that exists only on a
larger node, and files that each node writes to the same path.

- DDP150 is an incident: the emulation (rank/emulate.py) refuses a CUDA device index at or past
  the node's GPU count as CUDA does (`InvalidDeviceOrdinal`), and the crash probe names it with
  this code, the rank, its node and the user's line.
- DDP151: every `torch.save` to a file path is recorded per rank (path, the user's line) with
  the rank's node; after the job, a path written by ranks of two or more nodes is reported.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ddpcheck.findings import Severity
from ddpcheck.run.rank import crash_record
from ddpcheck.run.records import Record, node_of, section
from ddpcheck.run.registry import Incident, Probe, RuntimeCheck
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict, plural

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

NAME = "nodes"
MAX_PATHS = 32  # distinct saved paths kept per rank


class DeviceNotOnNode(Incident):
    """A rank asked for a CUDA device its node does not have: the global rank used as a device index.

    On one machine, `RANK` and `LOCAL_RANK` are the same number, so `torch.cuda.set_device(rank)`,
    `model.to(f"cuda:{rank}")` and `DDP(model, device_ids=[rank])` work. On the second node of a
    job of 4 GPUs per node, global rank 4 asks for `cuda:4`, which does not exist there: CUDA
    raises "invalid device ordinal" and the job dies after its time in the queue. `ddpcheck run
    --nodes 2 --nproc 4` starts two nodes on this machine; under CUDA emulation each node has
    `--nproc` GPUs and refuses an index at or past it the way a real node does, at your line:
    `torch.cuda.set_device`, `torch.cuda.device(i)`, `.to(i)` / `.to("cuda:i")` / `.cuda(i)` on
    tensors and modules, `device=i` in tensor factories, and DDP's `device_ids` / `output_device`.
    `ddpcheck lint` reports the same mistake from the source where it can see that the index comes
    from the global rank (DDP007); the run finds it however the index was computed.

    ## Why it matters

    The script is right on every single-node run and fails only on a cluster, from the second node
    on.

    ## How to fix

    Index devices by `LOCAL_RANK` (the rank within the node), not by the global rank:
    `local_rank = int(os.environ["LOCAL_RANK"])`, then `torch.cuda.set_device(local_rank)`,
    `model.to(local_rank)` and `DDP(model, device_ids=[local_rank])`.

    ## References

    - https://pytorch.org/docs/stable/elastic/run.html#environment-variables
    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html
    """

    code = "DDP150"
    name = "device-not-on-node"
    severity = Severity.ERROR
    explains = ("DDP120",)  # the crash it is
    hint = "index the GPU by LOCAL_RANK, not the global rank: torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"
    INVALID = ("""
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)  # rank 4 on the second node of 4-GPU nodes: invalid device ordinal
    model = DDP(Net().to(rank), device_ids=[rank])
    """,)
    VALID = ("""
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(Net().to(local_rank), device_ids=[local_rank])
    """,)


class NodesWriteOnePath(RuntimeCheck):
    """Ranks on different nodes saved to the same file path: on a shared filesystem they overwrite each other.

    A checkpoint saved under `if local_rank == 0:` is written once per node: on a cluster whose
    nodes share a filesystem (NFS, Lustre, a mounted bucket), every node writes the same file at the
    same moment. The last writer wins at best; at worst a reader (the resumed job, an evaluation
    script) loads a file that another node is still writing. ddpcheck records each `torch.save` to
    a path with the rank and node that made it, and reports a path written from two or more nodes
    with the ranks, their nodes and your line. Run it with several nodes on one machine:
    `ddpcheck run --nodes 2 --nproc 2 train.py`.

    ## Why it matters

    Torn or interleaved checkpoints are found only when a job tries to resume from one.

    ## How to fix

    Save on the global rank 0 only (`if dist.get_rank() == 0:` or `int(os.environ["RANK"]) == 0`),
    or put the node's rank in the file name when every node must keep its own copy on local disk.

    ## References

    - https://pytorch.org/tutorials/intermediate/ddp_tutorial.html#save-and-load-checkpoints
    """

    code = "DDP151"
    name = "nodes-write-one-path"
    severity = Severity.WARNING
    needs = None
    hint = "save on the global rank 0 (dist.get_rank() == 0), not on each node's local rank 0"
    INVALID = ("""
    if int(os.environ["LOCAL_RANK"]) == 0:  # true once per node
        torch.save(model.module.state_dict(), "checkpoints/last.pt")
    """,)
    VALID = ("""
    if dist.get_rank() == 0:  # once per job
        torch.save(model.module.state_dict(), "checkpoints/last.pt")
    """,)


def _path_of(target: Any) -> str | None:
    """The file a `torch.save` writes: a path, or an open file's name; None for a buffer."""
    if isinstance(target, (str, os.PathLike)):
        return os.path.abspath(os.fspath(target))
    name = getattr(target, "name", None)
    return os.path.abspath(name) if isinstance(name, str) and not name.startswith("<") else None


def capture(session: Session) -> None:
    import functools

    import torch

    from ddpcheck.run.rank.sites import call_site

    saved: dict[str, Any] = session.section(NAME).setdefault("saved", {})
    original = torch.save

    @functools.wraps(original)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        path = _path_of(f)
        if path is not None and (path in saved or len(saved) < MAX_PATHS):
            entry = saved.setdefault(path, {"site": call_site(), "count": 0})
            entry["count"] += 1
        return original(obj, f, *args, **kwargs)

    setattr(torch, "save", save)


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    return _device_not_on_node(records) + _one_path(records)


def _device_not_on_node(records: list[Record]) -> list[Verdict]:
    """The job's root-cause crash, when it is a device index the rank's node does not have."""
    own = [c for c in crash_record.read(records) if not c.consequence]
    if not own or own[0].type != "InvalidDeviceOrdinal":
        return []
    cause = own[0]
    nodes = {r.get("rank"): (node_of(r), r.get("local_rank")) for r in records}
    same = sorted(c.rank for c in own if c.type == cause.type and c.line == cause.line)
    node, local = nodes.get(cause.rank, (0, None))
    who = f"rank {cause.rank} (node {node}, LOCAL_RANK {local})" if local is not None else f"rank {cause.rank}"
    others = [r for r in same if r != cause.rank]
    also = f"; {'ranks' if len(others) > 1 else 'rank'} {', '.join(map(str, others))} failed the same way" \
        if others else ""
    where = f" at {os.path.basename(cause.path)}:{cause.line}" if cause.path else ""
    message = (f"{who}: {cause.message}{where}{also}. The global rank was used as a device index: "
               "index the GPU by LOCAL_RANK")
    return [Verdict(DeviceNotOnNode.code, FAIL, message, message=message, ranks=tuple(same), path=cause.path,
                    line=cause.line, hint=False,
                    details={"node": node, "local_rank": local, "traceback": cause.traceback})]


def _one_path(records: list[Record]) -> list[Verdict]:
    nodes = {node_of(r) for r in records}
    writers: dict[str, list[tuple[int, int, str | None]]] = {}
    for record in records:
        for path, entry in section(record, NAME).get("saved", {}).items():
            writers.setdefault(path, []).append((record.get("rank", 0), node_of(record), entry.get("site")))
    if len(nodes) < 2:
        return [Verdict(NodesWriteOnePath.code, SKIP, "one node (`--nodes 2` runs two on this machine)")]
    if not writers:
        return [Verdict(NodesWriteOnePath.code, SKIP, "no torch.save to a file")]
    shared = {path: w for path, w in writers.items() if len({node for _, node, _ in w}) > 1}
    if not shared:
        return [Verdict(NodesWriteOnePath.code, PASS,
                        f"{plural(len(writers), 'saved file')}, each written from one node")]
    path, who = sorted(shared.items())[0]
    who = sorted(who)
    site = next((s for _, _, s in who if s), None)
    shown = ", ".join(f"rank {rank} (node {node})" for rank, node, _ in who)
    where = f" at {os.path.basename(site.rsplit(':', 1)[0])}:{site.rsplit(':', 1)[1]}" if site else ""
    more = f" (and {plural(len(shared) - 1, 'other path')})" if len(shared) > 1 else ""
    message = (f"{os.path.relpath(path)} is saved by {shown}{where}{more}: one writer per node, so on a "
               "cluster whose nodes share a filesystem they overwrite each other; save on the global rank 0")
    file, line = (site.rsplit(":", 1)[0], int(site.rsplit(":", 1)[1])) if site else (None, None)
    return [Verdict(NodesWriteOnePath.code, FAIL, f"{os.path.basename(path)} written from "
                    f"{len({n for _, n, _ in who})} nodes: {shown}", message=message,
                    ranks=tuple(r for r, _, _ in who), path=file, line=line,
                    details={"paths": {p: [{"rank": r, "node": n, "site": s} for r, n, s in sorted(w)]
                                       for p, w in shared.items()}})]


PROBE = Probe(NAME, (DeviceNotOnNode, NodesWriteOnePath), judge, capture, order=90)
