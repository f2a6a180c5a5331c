"""Hang diagnosis: a per-rank record of the collectives each rank entered, and a watchdog.

The record is cheap: every `torch.distributed` collective the user's code calls bumps a sequence
number and keeps (op, first tensor's shape and dtype, the user's call site) for the one call in
flight and the one before it; nothing is sent anywhere while the job makes progress.

The watchdog is a daemon thread per rank. When its rank has made no progress (no collective
entered or left, no optimizer step) for `--hang-timeout` seconds it dumps the rank's Python stacks
with faulthandler (which works while the main thread is blocked inside gloo's C++), publishes its
record on the job's rendezvous store, and waits for the other ranks' records. Once every rank is
stalled and at least one is blocked in a collective, one rank composes the verdict ("rank 0 is in
barrier at train.py:42 (call #7); ranks 1-3 are in all_reduce at train.py:57 (call #7)"); every
rank writes it to the run directory and leaves with HANG_EXIT_CODE, which ends the job.

A rank that computes outside any collective (CPU busy) holds the verdict back: that is slow, not
hung; so does every rank waiting in the same collective, for four hang timeouts. With
`--collective-timeout S`, a per-collective timeout is also given to init_process_group (when the
script passes none), as a backstop: gloo then raises instead of waiting its default 30 minutes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass

from ddpcheck.run.rank import sites
from ddpcheck.run.records import HANG_VERDICT_FILE as VERDICT_FILE

HANG_EXIT_CODE = 87
BUSY_CPU_RATIO = 0.05  # CPU seconds per wall second above which a rank counts as computing (blocked in gloo: ~0)
_KEY = "ddpcheck/hang/"

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv",
)  # fmt: skip


@dataclass(frozen=True)
class Call:
    op: str
    seq: int  # 1-based count of the collectives this rank entered
    site: str | None  # the user's file:line
    tensor: str  # "float32[64, 10]", "" when the call has no tensor argument

    def describe(self) -> str:
        where = f" at {short(self.site)}" if self.site else ""
        return f"{self.op}{where} (call #{self.seq})"


def short(site: str) -> str:
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


class Ledger:
    """What one rank has done lately. Updated on the training thread, read by the watchdog."""

    def __init__(self) -> None:
        self.seq = 0
        self.events = 0  # any progress: a collective entered or left, an optimizer step
        self.last_progress = time.monotonic()
        self.current: Call | None = None
        self.last: Call | None = None

    def enter(self, op: str, args: tuple, kwargs: dict) -> None:
        self.seq += 1
        self.current = Call(op, self.seq, sites.call_site(2), _describe_tensor(args, kwargs))
        self.progress()

    def enter_ours(self, what: str) -> None:
        """ddpcheck's own check traffic (not counted as the user's call): a rank blocked there
        still says where it is."""
        self.current = Call(what, self.seq, sites.call_site(2), "")
        self.progress()

    def leave(self) -> None:
        self.last, self.current = self.current, None
        self.progress()

    def progress(self) -> None:
        self.events += 1
        self.last_progress = time.monotonic()


LEDGER = Ledger()
_ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # ddpcheck/run/
# ddpcheck modules that wrap a collective on the user's behalf (the call is still the user's).
_PASS_THROUGH = {os.path.join(_ours, "rank", "emulate.py"), os.path.join(_ours, "checks", "timing.py")}


def _describe_tensor(args: tuple, kwargs: dict) -> str:
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            value = value[0]
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    return ""


PROBE = "hangs"


def install(session) -> None:
    """Wrap the collectives of `torch.distributed` to keep the ledger; through the session's
    hooks, start the watchdog after init_process_group (and give it a backstop timeout if asked)."""
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_post_hook

    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, "__ddpcheck_hangs__", False):
            setattr(dist, name, _recorded(name, original))
    timeout_s = session.options.hang_timeout
    backstop = session.options.collective_timeout

    def before_init(kwargs: dict) -> None:
        # Off by default: a legitimately long wait (rank 0 evaluating while the others sit in a
        # barrier) must not start failing because ddpcheck is watching.
        if kwargs.get("timeout") is None and backstop > 0:
            from datetime import timedelta

            kwargs["timeout"] = timedelta(seconds=backstop)

    session.before_init.append(before_init)
    session.after_init.append(lambda: start_watchdog(timeout_s, session))
    session.at_end.append(lambda why: _STOP.set())  # no collectives after the end: nothing to watch

    session.before_exchange.append(
        lambda step: LEDGER.enter_ours(f"ddpcheck's check exchange after optimizer step {step}"))
    session.after_exchange.append(lambda step: LEDGER.leave())
    register_optimizer_step_post_hook(lambda *a, **k: LEDGER.progress())


def _recorded(op: str, fn):
    def collective(*args, **kwargs):
        # ddpcheck's own check traffic is not the user's: leave it out of the record.
        caller = sys._getframe(1).f_code.co_filename
        if caller.startswith(_ours) and caller not in _PASS_THROUGH:
            return fn(*args, **kwargs)
        LEDGER.enter(op, args, kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            LEDGER.leave()

    collective.__name__ = fn.__name__
    collective.__qualname__ = fn.__qualname__
    collective.__doc__ = fn.__doc__
    collective.__wrapped__ = fn
    collective.__ddpcheck_hangs__ = True
    return collective


def run_dir(session=None) -> str:
    """Where this node's records go (the session's record directory; a temporary one without)."""
    path = (session.options.record_dir if session is not None else "") or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"ddpcheck-{os.getppid()}"
    )
    os.makedirs(path, exist_ok=True)
    return path


_watchdog: threading.Thread | None = None
_STOP = threading.Event()


def start_watchdog(timeout_s: float, session=None) -> None:
    global _watchdog
    if _watchdog is not None or timeout_s <= 0:
        return
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    try:
        store = store.clone()  # its own connection: the training thread may be using the other
    except Exception:  # noqa: BLE001 - older stores cannot clone; sharing one is still safe
        pass
    dog = Watchdog(store, dist.get_rank(), dist.get_world_size(), timeout_s, session)
    _watchdog = threading.Thread(target=dog.run, name="ddpcheck-hang-watchdog", daemon=True)
    _watchdog.start()


class Watchdog:
    def __init__(self, store, rank: int, world: int, timeout_s: float, session=None) -> None:
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout_s
        self.session = session
        self.poll = min(1.0, max(0.1, timeout_s / 5))
        self.posted: tuple[int, bool] | None = None  # (ledger events, busy) last published
        self.stalled_since: float | None = None
        self.all_posted_since: float | None = None
        self.cpu, self.wall = time.process_time(), time.monotonic()

    def key(self, rank: int) -> str:
        return f"{_KEY}state/{rank}"

    def run(self) -> None:
        try:
            while not _STOP.wait(self.poll):
                self.tick()
        except Exception as exc:  # noqa: BLE001 - a broken watchdog must never break training
            print(f"ddpcheck: hang watchdog on rank {self.rank} stopped: {exc}", file=sys.stderr)

    def busy(self) -> bool:
        """Computing outside any collective (a long evaluation on one rank, say): the process
        burns CPU. A rank blocked in gloo burns next to none."""
        cpu, wall = time.process_time(), time.monotonic()
        ratio = (cpu - self.cpu) / max(wall - self.wall, 1e-3)
        self.cpu, self.wall = cpu, wall
        return LEDGER.current is None and ratio > BUSY_CPU_RATIO

    def tick(self) -> None:
        ledger = LEDGER
        busy = self.busy()
        stalled = time.monotonic() - ledger.last_progress >= self.timeout
        if not stalled:
            if self.posted is not None:
                self.store.delete_key(self.key(self.rank))
                self.posted = None
                self.stalled_since = self.all_posted_since = None
            return
        if self.store.check([_KEY + "verdict"]):
            self.finish(json.loads(self.store.get(_KEY + "verdict")))
        if self.posted != (ledger.events, busy):
            self.posted = (ledger.events, busy)
            self.store.set(self.key(self.rank), json.dumps({**self.state(), "busy": busy}))
        if not busy:
            self.maybe_decide()

    def state(self) -> dict:
        ledger = LEDGER
        current, last = ledger.current, ledger.last
        return {
            "rank": self.rank,
            "events": ledger.events,
            "stalled_s": round(time.monotonic() - ledger.last_progress, 1),
            "current": None if current is None else asdict(current),
            "last": None if last is None else asdict(last),
            "stack": self.dump_stack(),
        }

    def dump_stack(self) -> str:
        path = os.path.join(run_dir(self.session), f"stack-rank{self.rank}.txt")
        with open(path, "w") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
        with open(path) as f:
            text = f.read()
        # Drop this watchdog thread's own block (faulthandler calls it "Current thread").
        blocks = [b for b in text.split("\n\n") if b.strip() and not b.startswith("Current thread")]
        return "\n\n".join(blocks)[-4000:]

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
        if any(s.get("busy") for s in states.values()):
            return  # a rank is still computing: the others wait for it, which is slow, not hung
        if not any(s["current"] for s in states.values()):
            return  # nobody waits in a collective: not a communication hang
        waiting = {(s["current"]["op"], s["current"]["seq"]) for s in states.values() if s["current"]}
        if len(states) == self.world and len(waiting) == 1 and now - self.stalled_since < 4 * self.timeout:
            return  # all in the same collective: maybe just a slow one; give it longer
        if self.store.add(_KEY + "claim", 1) != 1:
            return  # another rank is deciding
        verdict = compose_verdict(states, self.world, self.timeout)
        self.store.set(_KEY + "verdict", json.dumps(verdict))
        self.finish(verdict, decided=True)

    def finish(self, verdict: dict, decided: bool = False) -> None:
        """Keep this rank's record and the verdict, wait (briefly) until every rank has done the
        same — the first rank to exit makes the launcher kill the others — then leave."""
        try:
            if self.session is not None:  # what this rank checked until now
                self.session.meta["status"] = "hung"
                self.session.flush(force=True)
            path = os.path.join(run_dir(self.session), VERDICT_FILE)
            tmp = f"{path}.{self.rank}.tmp"
            with open(tmp, "w") as f:
                json.dump(verdict, f)
            os.replace(tmp, path)
            if decided:  # said once, by the rank that decided; the report says it again
                sys.stderr.write(f"ddpcheck: hang: {verdict['message']}; stopping the job\n")
                sys.stderr.flush()
            self.store.set(f"{_KEY}done/{self.rank}", "1")
            done = [f"{_KEY}done/{r}" for r in range(self.world)]
            deadline = time.monotonic() + max(3.0, 3 * self.poll)
            while time.monotonic() < deadline and not self.store.check(done):
                time.sleep(0.05)
        except Exception:  # noqa: BLE001 - the store may be gone with its host rank: leave anyway
            pass
        os._exit(HANG_EXIT_CODE)


def compose_verdict(states: dict[int, dict], world: int, timeout_s: float) -> dict:
    """Group the ranks by where they are stuck and say how they disagree."""
    groups: dict[str, list[int]] = {}
    for rank in range(world):
        state = states.get(rank)
        if state is None:
            text = "silent: it did not answer (dead, or stuck outside Python)"
        elif state["current"]:
            text = "in " + Call(**state["current"]).describe()
        else:
            last = state["last"]
            text = "not in a collective" + (
                f"; its last one was {Call(**last).describe()}" if last else " and has entered none"
            )
        groups.setdefault(text, []).append(rank)
    parts = [f"{_ranks(rs)} {'is' if len(rs) == 1 else 'are'} {text}" for text, rs in groups.items()]
    currents = {r: s["current"] for r, s in states.items() if s.get("current")}
    ops = {(c["op"], c["seq"]) for c in currents.values()}
    if len(groups) == 1 and len(ops) == 1:
        why = "every rank waits in the same collective: a rank outside Python or the network is stuck"
    elif len({c["seq"] for c in currents.values()}) > 1:
        why = "the ranks entered different numbers of collectives (a collective under a rank-dependent condition?)"
    else:
        why = "the ranks wait in different collectives (a collective under a rank-dependent condition?)"
    culprit = min(groups.items(), key=lambda kv: (len(kv[1]), kv[1]))[1] if len(groups) > 1 else []
    site = None
    for r in culprit or sorted(currents):
        if r in currents and currents[r]["site"]:
            site = currents[r]["site"]
            break
    return {
        "message": f"no progress for {timeout_s:g}s: " + "; ".join(parts) + f" — {why}",
        "site": site,
        "ranks": sorted(culprit),
        "states": {str(r): s for r, s in states.items()},
        "timeout_s": timeout_s,
    }


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}–{ranks[-1]}" if len(ranks) > 2 else f"ranks {ranks[0]} and {ranks[1]}"
    return "ranks " + ", ".join(map(str, ranks))
