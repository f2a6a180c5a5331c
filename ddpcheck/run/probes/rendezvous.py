"""Rendezvous under the launcher: a hard-coded `tcp://` init_method, and rank/world_size arguments
that disagree with the launcher's RANK/WORLD_SIZE.

Under torchrun every rank becomes a client of the agent's store; a `tcp://host:port` of the
script's own makes every rank wait for a store that is not there (30 minutes). We rewrite it to
`env://` so the run goes on, and say so (DDP113). Explicit `rank=`/`world_size=` that disagree with
the launcher's are replaced by the launcher's and reported (DDP114).
"""

from __future__ import annotations

import os

from ddpcheck.run.verdict import FAIL, PASS, SKIP, Context, Verdict

PROBE = "rendezvous"
ALWAYS = True  # without the rewrite a hard-coded tcp:// hangs the run, whatever --checks says
TCP_CODE, RANK_CODE = "DDP113", "DDP114"


def install(session) -> None:
    section = session.section(PROBE)
    section["seen"] = False

    def before_init(kwargs: dict) -> None:
        section["seen"] = True
        if not session.under_launcher or kwargs.get("store") is not None:
            return
        method = kwargs.get("init_method")
        if isinstance(method, str) and method.startswith("tcp://"):
            kwargs["init_method"] = "env://"
            session.note(TCP_CODE, f"init_process_group(init_method={method!r}) is hard-coded; under "
                         "the launcher it waits for a store that is not there (30 min). ddpcheck "
                         "rewrote it to 'env://'", init_method=method)
        for arg, env in (("rank", "RANK"), ("world_size", "WORLD_SIZE")):
            given, launcher = kwargs.get(arg), os.environ.get(env)
            if given is None or launcher is None or given == -1:
                continue
            if int(given) != int(launcher):
                kwargs[arg] = int(launcher)
                session.note(RANK_CODE, f"init_process_group({arg}={given}) disagrees with the "
                             f"launcher's {env}={launcher}; ddpcheck used {launcher}",
                             argument=arg, given=int(given), launcher=int(launcher))

    session.before_init.append(before_init)


def _notes(records: list[dict], code: str) -> dict[int, dict]:
    return {r["rank"]: n for r in records for n in r.get("notes", []) if n["code"] == code}


def judge(records: list[dict], ctx: Context) -> list[Verdict]:
    seen = any(r.get("probes", {}).get(PROBE, {}).get("seen") for r in records)
    out = []
    for code, what in ((TCP_CODE, "init_method"), (RANK_CODE, "rank/world_size")):
        notes = _notes(records, code)
        if notes:
            first = notes[min(notes)]
            out.append(Verdict(code, FAIL, first["message"].split(";")[0], message=first["message"],
                               ranks=tuple(sorted(notes)), details={"per_rank": notes}))
        elif seen:
            out.append(Verdict(code, PASS, f"{what} left to the launcher"))
        else:
            out.append(Verdict(code, SKIP, "init_process_group was not called"))
    return out
