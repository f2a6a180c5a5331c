"""Hang diagnosis in every rank: the collective ledger (rank/ledger.py), its live file
(run/live.py), and the watchdog (rank/watchdog.py), wired to the session. Always on: a run that
hangs must be named and stopped whatever checks were selected.

With `--collective-timeout S`, a per-collective timeout is also given to init_process_group (when
the script passes none), as a backstop: gloo then raises instead of waiting its default 30 minutes.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import timedelta
from typing import Any

from ddpcheck.run import diagnose, flight_recorder
from ddpcheck.run.rank import ledger as ledger_mod
from ddpcheck.run.rank import sites
from ddpcheck.run.rank.ledger import LEDGER
from ddpcheck.run.rank.session import Session
from ddpcheck.run.rank.watchdog import HANG_EXIT_CODE, Watchdog
from ddpcheck.run.records import HANG_VERDICT_FILE

__all__ = ["HANG_EXIT_CODE", "install"]

_dogs: list[Watchdog] = []


def install(session: Session) -> None:
    """Keep the ledger from now on; start the watchdog once init_process_group has returned."""
    ledger_mod.install(sites.call_site, session.nested_step)
    backstop = session.options.collective_timeout
    dumped: list[str | None] = []

    def before_init(kwargs: dict[str, Any]) -> None:
        # Off by default: a legitimately long wait (rank 0 evaluating while the others sit in a
        # barrier) must not start failing because ddpcheck is watching.
        if kwargs.get("timeout") is None and backstop > 0:
            kwargs["timeout"] = timedelta(seconds=backstop)

    def keep_section() -> None:
        session.section(diagnose.SECTION).update(LEDGER.section())

    def pass_ended() -> None:
        keep_section()
        session.flush(force=True)

    def on_verdict(verdict: dict[str, Any]) -> None:
        session.meta["status"] = "hung"
        if not dumped:  # once: the deciding rank may record the verdict twice
            dumped.append(flight_recorder.write_rank_dump(session.rank))
        keep_section()
        session.flush(force=True)
        path = os.path.join(run_dir(session), HANG_VERDICT_FILE)
        tmp = f"{path}.{session.rank}.tmp"
        with open(tmp, "w") as fh:
            json.dump(verdict, fh)
        os.replace(tmp, path)

    def after_init() -> None:
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        ledger_mod.open_live(session.options.record_dir, rank)
        timeout_s = session.options.hang_timeout
        if timeout_s <= 0 or _dogs:
            return
        store = dist.distributed_c10d._get_default_store()
        try:
            store = getattr(store, "clone")()  # its own connection: the training thread may be using the other
        except Exception:  # noqa: BLE001 - older stores cannot clone; sharing one is still safe
            pass
        dog = Watchdog(store, rank, world, timeout_s, record_dir=run_dir(session),
                       is_user_file=sites.is_user_file, on_verdict=on_verdict)
        _dogs.append(dog)
        threading.Thread(target=dog.run, name="ddpcheck-hang-watchdog", daemon=True).start()

    def at_end(why: str) -> None:
        for dog in _dogs:  # no collectives after the end: nothing to watch
            dog.stop.set()
        keep_section()

    LEDGER.on_pass_end = pass_ended
    session.on_join_enter.append(LEDGER.join_entered)
    session.on_join_exit.append(LEDGER.join_left)
    session.on_ddp_forward.append(lambda ddp, args, kwargs: ledger_mod.forward_started(ddp))
    session.before_init.append(before_init)
    session.after_init.append(after_init)
    session.after_step.append(lambda optimizer, step: keep_section())
    session.at_end.append(at_end)
    session.before_exchange.append(
        lambda step: LEDGER.enter_ours(f"ddpcheck's check exchange after optimizer step {step}"))
    session.after_exchange.append(lambda step: LEDGER.leave_ours())


def run_dir(session: Session) -> str:
    """Where this node's records go (the session's record directory; a temporary one without)."""
    path = session.options.record_dir or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ddpcheck-{os.getppid()}")
    os.makedirs(path, exist_ok=True)
    return path
