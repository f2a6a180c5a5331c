"""What every rank installs once the user's code has imported torch, in this order:

1. ddpcheck's run-time support, which the run needs whatever checks are selected: the CUDA
   emulation (when on), the rank identity of spawned workers, the hang ledger and watchdog, the
   guard against `mp.spawn` under the launcher, and the sharing of records across nodes;
2. the hook layer (rank/hooks.py), which drives the session's hook lists;
3. each probe's `capture(session)`, in the registry's order (ddpcheck/run/registry.py), for the
   selected probes and those that are always on.

A process that never imports torch pays one meta-path lookup and nothing else.
"""

from __future__ import annotations

import sys
import traceback

from ddpcheck.run import registry
from ddpcheck.run.rank import emulate, hang_detection, hooks, nodes, rehearsal, spawn
from ddpcheck.run.rank.session import Session
from ddpcheck.run.rank.torch_import import when_torch_imported


def instrument(session: Session) -> None:
    if emulate.enabled():
        emulate.install()
    if not session.under_launcher:
        session.before_init.insert(0, lambda kwargs: spawn.adopt_identity(session, kwargs))
    hang_detection.install(session)
    if session.under_launcher:
        spawn.install_guard(session)
    nodes.install(session)
    hooks.install(session)
    for probe in registry.probes():
        if probe.capture is not None and (probe.always or any(map(session.options.selects, probe.codes))):
            probe.capture(session)
    if rehearsal.enabled():  # last: its process group replaces the one the script asked for
        rehearsal.install(session)


def instrument_after_torch(session: Session) -> None:
    """Instrument once the user's code has imported torch (now, if it already has). The probe
    modules are imported at once: the user's script replaces sys.path[0], which may be where
    ddpcheck was found."""
    registry.probes()

    def install() -> None:
        try:
            instrument(session)
        except Exception:  # noqa: BLE001 - a broken probe must not stop the user's script
            print("ddpcheck: could not install its probes; the run goes on unchecked:\n"
                  + traceback.format_exc(), file=sys.stderr)

    when_torch_imported(install)
