"""Rendezvous under the launcher: a hard-coded `tcp://` init_method, and rank/world_size arguments
that disagree with the launcher's RANK/WORLD_SIZE.

Under torchrun every rank becomes a client of the agent's store; a `tcp://host:port` of the
script's own makes every rank wait for a store that is not there (30 minutes). We rewrite it to
`env://` so the run goes on, and say so (DDP113). Explicit `rank=`/`world_size=` that disagree with
the launcher's are replaced by the launcher's and reported (DDP114).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import os
from urllib.parse import urlparse

from ddpcheck.run.records import Record
from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict
from ddpcheck.findings import Severity
from ddpcheck.run.registry import Probe, RuntimeCheck

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session


class HardcodedInitMethod(RuntimeCheck):
    """`init_process_group(init_method="tcp://...")` is hard-coded in a script run by a launcher.

    ## Why it matters

    Under torchrun every rank connects to the launcher's store; a `tcp://host:port` of the
    script's own makes each rank, rank 0 included, connect as a client to a store nobody serves,
    and the job waits for the rendezvous timeout (the script's `timeout=`, else 30 minutes).
    ddpcheck rewrites it to `env://` so the run goes on, and reports it. A `tcp://` address that
    is the launcher's own (`MASTER_ADDR:MASTER_PORT`) is the launcher's store: no finding.

    ## How to fix

    Call `init_process_group(backend)` without `init_method` (the default `env://` reads
    MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE that the launcher sets).

    ## References

    - https://pytorch.org/docs/stable/distributed.html#tcp-initialization
    - https://pytorch.org/docs/stable/elastic/run.html
    """

    code = "DDP113"
    needs = "init"
    name = "init-method-bypasses-launcher"
    severity = Severity.ERROR
    INVALID = ("""
        dist.init_process_group("gloo", init_method="tcp://10.0.0.1:23456",
                                rank=rank, world_size=world_size)
    """,)
    VALID = ("""
        dist.init_process_group("gloo")
    """,)


class RankWorldSizeMismatch(RuntimeCheck):
    """`init_process_group(rank=..., world_size=...)` disagrees with the launcher's RANK/WORLD_SIZE.

    ## Why it matters

    The launcher assigns each process its global RANK and the WORLD_SIZE. Explicit values that
    disagree (LOCAL_RANK passed as rank on several nodes, a hard-coded world size) make the
    rendezvous wait for ranks that never come, or two processes claim one rank. ddpcheck uses the
    launcher's values so the run goes on, and reports it.

    ## How to fix

    Leave `rank` and `world_size` out of `init_process_group()` under torchrun, or read them from
    `os.environ["RANK"]` and `os.environ["WORLD_SIZE"]`.

    ## References

    - https://pytorch.org/docs/stable/elastic/run.html#environment-variables
    """

    code = "DDP114"
    needs = "init"
    name = "rank-world-size-mismatch"
    severity = Severity.ERROR
    INVALID = ("""
        dist.init_process_group("gloo", rank=int(os.environ["LOCAL_RANK"]), world_size=2)
    """,)
    VALID = ("""
        dist.init_process_group("gloo")
    """,)


NAME = "rendezvous"


def capture(session: Session) -> None:
    section = session.section(NAME)
    section["seen"] = False

    def before_init(kwargs: dict[str, Any]) -> None:
        section["seen"] = True
        method = kwargs.get("init_method")
        section["given"] = {"init_method": method if isinstance(method, str) else None,
                            "store": kwargs.get("store") is not None,
                            "rank": kwargs.get("rank") not in (None, -1),
                            "world_size": kwargs.get("world_size") not in (None, -1)}
        if not session.under_launcher or kwargs.get("store") is not None:
            return
        method = kwargs.get("init_method")
        if isinstance(method, str) and method.startswith("tcp://") and not _is_launchers_store(method):
            kwargs["init_method"] = "env://"
            session.note(HardcodedInitMethod.code, f"init_process_group(init_method={method!r}) is hard-coded; "
                         f"{_what_happens(method, kwargs.get('timeout'))}. ddpcheck rewrote it to 'env://'",
                         init_method=method)
        for arg, env in (("rank", "RANK"), ("world_size", "WORLD_SIZE")):
            given, launcher = kwargs.get(arg), os.environ.get(env)
            if given is None or launcher is None or given == -1:
                continue
            if int(given) != int(launcher):
                kwargs[arg] = int(launcher)
                session.note(RankWorldSizeMismatch.code, f"init_process_group({arg}={given}) disagrees with the "
                             f"launcher's {env}={launcher}; ddpcheck used {launcher}",
                             argument=arg, given=int(given), launcher=int(launcher))

    session.before_init.append(before_init)


def _address(method: str) -> tuple[str, int | None]:
    parsed = urlparse(method)
    try:
        return parsed.hostname or "", parsed.port
    except ValueError:
        return parsed.hostname or "", None


_LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def _is_launchers_store(method: str) -> bool:
    """`tcp://MASTER_ADDR:MASTER_PORT`: the launcher's own store, which every rank reaches."""
    host, port = _address(method)
    addr, launcher_port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if port is None or not launcher_port.isdigit() or port != int(launcher_port):
        return False
    return host == addr or (host in _LOOPBACK and addr in _LOOPBACK)


def _what_happens(method: str, timeout: Any) -> str:
    """What this init_method does under this launcher, as torch's rendezvous handles it."""
    host, port = _address(method)
    where = f"{host}:{port}" if port is not None else host or method
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else None
    wait = (f"{seconds:g} s, the timeout the script passed" if seconds is not None
            else "30 min, init_process_group's default timeout")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        # torch.distributed.rendezvous: under the launcher's agent store every rank, rank 0
        # included, connects as a client to the init_method's address and none serves it.
        return (f"under the launcher every rank, rank 0 included, connects as a client to {where}, "
                f"where no store is served, and waits for it ({wait})")
    return (f"rank 0 serves a store of its own at {where} beside the launcher's: ranks on other "
            f"nodes reach it only if {host or 'that host'} is rank 0's address and the port is free")


def _notes(records: list[Record], code: str) -> dict[int, dict[str, Any]]:
    return {r["rank"]: n for r in records for n in r.get("notes", []) if n["code"] == code}


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    seen = any(r.get("probes", {}).get(NAME, {}).get("seen") for r in records)
    out = []
    for code, what in ((HardcodedInitMethod.code, "init_method"), (RankWorldSizeMismatch.code, "rank/world_size")):
        notes = _notes(records, code)
        if notes:
            first = notes[min(notes)]
            out.append(Verdict(code, FAIL, first["message"].split(";")[0], message=first["message"],
                               ranks=tuple(sorted(notes)), details={"per_rank": notes}))
        elif seen:
            out.append(Verdict(code, PASS, _passed(code, records)))
        else:
            out.append(Verdict(code, SKIP, "init_process_group was not called"))
    return out


def _passed(code: str, records: list[Record]) -> str:
    """What a passing row says, as the script wrote its init_process_group call."""
    given = [r.get("probes", {}).get(NAME, {}).get("given") or {} for r in records]
    if code == HardcodedInitMethod.code:
        if any(g.get("store") for g in given):
            return "a store of the script's own (no init_method)"
        methods = sorted({g["init_method"] for g in given if g.get("init_method")})
        if methods:
            return f"init_method={methods[0]!r} given by the script, no launcher's store bypassed"
        return "init_method left to the launcher"
    explicit = [arg for arg in ("rank", "world_size") if any(g.get(arg) for g in given)]
    if not explicit:
        return "rank/world_size left to the launcher"
    return f"{' and '.join(explicit)} passed explicitly, the launcher's values on every rank"


PROBE = Probe(NAME, (HardcodedInitMethod, RankWorldSizeMismatch), judge, capture, order=10, always=True)
