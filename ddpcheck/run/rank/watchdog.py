"""The hang watchdog: a daemon thread in every rank.

While its rank makes progress (enters or leaves a collective, DDP's included; draws a batch; steps
an optimizer) the watchdog only compares two clock readings each poll. Once the rank has made no
progress for the hang timeout, it reads what the training thread is doing — its collective ledger,
its Python stack (readable while the thread is blocked inside gloo's C++), whether it burns CPU —
and publishes that on the job's rendezvous store; a rank that still makes progress says so while
another waits. When every rank has published and none is computing or progressing, one rank
diagnoses the hang (diagnose.py: uneven work, the first collective the ranks
entered differently, or where each waits), writes the verdict, and every rank leaves with
HANG_EXIT_CODE, which ends the job. A rank that computes holds the verdict back: slow, not hung.
Ranks that never answer (dead, or stuck in C++ that holds the GIL) are decided without after one
more timeout, and the deciding rank kills those on its own node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable

from ddpcheck.run import diagnose as diagnose_mod
from ddpcheck.run import live as live_mod
from ddpcheck.run.rank import stacks
from ddpcheck.run.rank.ledger import LEDGER, Ledger

HANG_EXIT_CODE = 87
KEY = "ddpcheck/hang/"
ASKING = KEY + "asking"  # how many ranks are stalled and wait to hear from the others
SAMPLES = 5  # scheduler-state samples per poll once stalled
PASSES_SHOWN = 4
# torch.compile's first call on a loaded CPU machine takes minutes, much of it waiting: for its
# compile workers, for the file lock of a kernel another rank compiles into the shared cache. A
# rank inside the compiler is slow, not hung, for this long (or ten hang timeouts, if longer).
COMPILE_GRACE_S = 300.0


class Watchdog:
    def __init__(self, store: Any, rank: int, world: int, timeout_s: float, *, record_dir: str,
                 is_user_file: Callable[[str], bool], on_verdict: Callable[[dict[str, Any]], None],
                 ledger: Ledger = LEDGER, thread: threading.Thread | None = None) -> None:
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout_s
        self.record_dir, self.is_user_file, self.on_verdict = record_dir, is_user_file, on_verdict
        self.ledger = ledger
        self.thread = thread or threading.main_thread()
        self.meter = stacks.ThreadMeter(self.thread)
        self.poll = min(1.0, max(0.1, timeout_s / 10))
        self.posted: tuple[int, bool] | None = None  # (ledger events, busy) last published
        self.stalled_since: float | None = None
        self.all_posted_since: float | None = None
        self.measuring = False
        self.asked = False  # this rank counts itself in ASKING (it waits for the others)
        self.said_progressing = False  # it told the waiting ranks that it still makes progress
        self.stop = threading.Event()

    def key(self, rank: int) -> str:
        return f"{KEY}state/{rank}"

    def run(self) -> None:
        try:
            while not self.stop.wait(self.poll):
                self.tick()
        except Exception as exc:  # noqa: BLE001 - a broken watchdog must never break training
            print(f"ddpcheck: hang watchdog on rank {self.rank} stopped: {type(exc).__name__}: {exc}",
                  file=sys.stderr)

    def tick(self) -> None:
        stalled = time.monotonic() - self.ledger.last_progress >= self.timeout
        if not stalled:
            self.measuring = False
            if self.posted is not None:  # it moved on: withdraw its stalled state
                self.posted = None
                self.stalled_since = self.all_posted_since = None
                if self.asked:
                    self.store.add(ASKING, -1)
                    self.asked = False
                self.said_progressing = True  # replaced below, or deleted when nobody waits
            if self.store.add(ASKING, 0) > 0:
                # A rank waits: say at once that this one is working again. Deleting the stalled
                # state and saying so a poll later leaves a gap in which the waiting rank counts
                # this one as silent — just after it joined the collective the others wait in.
                self.store.set(self.key(self.rank), json.dumps(
                    {"rank": self.rank, "progressing": True, "at": time.time(), "events": self.ledger.events}))
                self.said_progressing = True
            elif self.said_progressing:
                self.store.delete_key(self.key(self.rank))
                self.said_progressing = False
            return
        if not self.asked:
            self.store.add(ASKING, 1)
            self.asked = True
        if not self.measuring:  # the load is measured from the moment the rank stalled
            self.meter.read()
            self.measuring = True
        for _ in range(SAMPLES):
            self.meter.sample()
            time.sleep(min(0.02, self.poll / 20))
        load = self.meter.read()
        if self.store.check([KEY + "verdict"]):
            self.finish(json.loads(self.store.get(KEY + "verdict")))
        busy = load.busy or self._waiting_for_workers(load)
        if self.posted != (self.ledger.events, busy):
            self.posted = (self.ledger.events, busy)
            self.store.set(self.key(self.rank), json.dumps(self.state(busy, load)))
        if not busy:
            self.maybe_decide()

    def _waiting_for_workers(self, load: stacks.Load) -> bool:
        """The training thread waits for work its worker processes are doing: DataLoader workers
        preparing a batch, torch.compile compiling (inside DDP's forward too; for COMPILE_GRACE_S),
        or, outside any collective, torch.compile's compile workers or any pool the script waits on. A thread blocked in a collective is not waiting for its workers."""
        # The same bar as the thread's own CPU: a busy worker on a machine loaded ten times over
        # still gets a fifth of a core, an idle one (a logging service beside a hung rank) ~0.01.
        place = stacks.place(stacks.thread_frames(self.thread.ident or 0))
        if place == stacks.COMPILING and \
                time.monotonic() - self.ledger.last_progress < max(COMPILE_GRACE_S, 10 * self.timeout):
            return True
        return place in (None, stacks.WAITING_FOR_DATA) and load.children_ratio > stacks.BUSY_CPU_RATIO

    def state(self, busy: bool, load: stacks.Load) -> dict[str, Any]:
        ledger = self.ledger
        frames = stacks.thread_frames(self.thread.ident or 0)
        passes = [p.to_json(ledger) for p in list(ledger.passes)[-PASSES_SHOWN:]]
        return {
            "rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(),
            "events": ledger.events, "stalled_s": round(time.monotonic() - ledger.last_progress, 1),
            "at": round(time.time() - (time.monotonic() - ledger.last_progress), 3),  # its last progress
            "busy": busy, "load": load.to_json(),
            "logs": {name: log.to_json() for name, log in ledger.logs().items()},
            "steps": ledger.steps, "forwards": ledger.forwards, "backwards": ledger.backwards,
            "passes": passes, "ours": ledger.ours, "place": stacks.place(frames), "in_join": ledger.joins > 0,
            "frames": stacks.user_frames(frames, self.is_user_file),
            "stack": stacks.format_stack(frames),
        }

    def maybe_decide(self) -> None:
        keys = [self.key(r) for r in range(self.world)]
        now = time.monotonic()
        if self.stalled_since is None:
            self.stalled_since = now
        if self.store.check(keys):
            if self.all_posted_since is None:
                self.all_posted_since = now  # wait one more poll: a rank that moved on withdraws
                return
        elif now - self.stalled_since < max(5.0, self.timeout):
            return  # ranks that never answer are dead or stuck outside Python: decide without them later
        states = {}
        for r, k in enumerate(keys):
            if self.store.check([k]):
                states[r] = json.loads(self.store.get(k))
        fresh = time.time() - 3 * self.poll - 2.0
        if any(s.get("progressing") and float(s.get("at", 0)) > fresh for s in states.values()):
            return  # a rank still makes progress (an evaluation loop, say): slow, not hung
        # One that said so long ago and no longer does has stopped answering.
        states = {r: s for r, s in states.items() if not s.get("progressing")}
        if any(s.get("busy") for s in states.values()):
            return  # a rank is still computing: the others wait for it, which is slow, not hung
        if self.store.add(KEY + "claim", 1) != 1:
            return  # another rank is deciding
        verdict = compose(states, self.world, self.timeout)
        self.store.set(KEY + "verdict", json.dumps(verdict))
        self.finish(verdict, decided=True)

    def finish(self, verdict: dict[str, Any], decided: bool = False) -> None:
        """Keep this rank's record and the verdict, wait briefly until every rank has done the
        same, kill the local ranks that never answered, and leave."""
        try:
            self.on_verdict(verdict)
            if decided:  # said once, by the rank that decided; the report says it again
                sys.stderr.write(f"ddpcheck: hang: {verdict['message']}; stopping the job\n")
                sys.stderr.flush()
            self.store.set(f"{KEY}done/{self.rank}", "1")
            done = [f"{KEY}done/{r}" for r in range(self.world)]
            deadline = time.monotonic() + max(3.0, 3 * self.poll)
            while time.monotonic() < deadline and not self.store.check(done):
                time.sleep(0.05)
            if decided:
                killed = self.kill_silent_local(done)
                if killed:  # said in the verdict: the report shows who was stopped by force
                    verdict.setdefault("details", {})["killed"] = killed
                    self.on_verdict(verdict)
        except Exception:  # noqa: BLE001 - the store may be gone with its host rank: leave anyway
            pass
        os._exit(HANG_EXIT_CODE)

    def kill_silent_local(self, done: list[str]) -> list[int]:
        """Ranks on this node that never said they were done (stuck in native code that holds the
        GIL, where not even a SIGTERM handler runs): SIGKILL, found by the pid in their live file.
        Returns the ranks killed."""
        killed = []
        for rank, key in enumerate(done):
            if rank == self.rank or self.store.check([key]):
                continue
            data = live_mod.read(live_mod.path_for(self.record_dir, rank))
            pid = int(data["pid"]) if data else 0
            if pid > 1 and pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(rank)
                except OSError:
                    pass
        return killed


def compose(states: dict[int, dict[str, Any]], world: int, timeout_s: float) -> dict[str, Any]:
    """The verdict the ranks write: the diagnosis, and every rank's state for the report."""
    ranks = {r: diagnose_mod.RankState.from_json(r, s) for r, s in states.items()}
    found = diagnose_mod.diagnose(ranks, world, hung_s=timeout_s)
    assert found is not None  # with hung_s there is always one
    now = time.time()
    progress = [float(s["at"]) for s in states.values() if "at" in s] or [now]
    return {
        "code": found.code, "message": found.message, "site": found.site, "ranks": list(found.ranks),
        # at: when the first rank stopped making progress; quiet_s: how long after the job's last
        # progress (on any rank) the verdict came.
        "details": {**found.details, "at": min(progress), "quiet_s": round(now - max(progress), 1)},
        "states": {str(r): s for r, s in states.items()}, "timeout_s": timeout_s,
    }
