"""Where a checked step's time goes, per rank, without a profiler's inflation.

Run as the *user script* of `ddpcheck run`, with the workload and its arguments after it:

    python -m ddpcheck run --nproc 2 --quiet --check-first 0 --check-every 1 \
        bench/profile_step.py bench/workloads/train_ddp.py --model 1m --steps 100 --out DIR

Before the workload imports torch (so before ddpcheck installs its probes) it wraps the session's
step machinery, every probe callback (they all run through `session.guard`) and `fingerprints`,
and adds up the thread CPU time and wall time of each, per rank. At exit it writes
DIR/profile-rank<R>.json: {name: [calls, cpu_s, wall_s]}. With PROFILE_STEP_CPROFILE=1 the optimizer
step hooks run under cProfile instead (DIR/profile-rank<R>.prof; their timings are then absent). Nested items are inside their callers
(`fingerprints` inside the probes' callbacks, the callbacks inside `after_optimizer_step`).
"thread_cpu_per_timed_step" holds the CPU seconds per timed step of each thread of the rank, by
thread name (gloo's included), over the workload's timed steps; the wrapper also runs under plain torchrun (nothing of ddpcheck is then called), which
gives the same per-thread figures without ddpcheck:

    python -m torch.distributed.run --standalone --nproc-per-node 2 bench/profile_step.py \
        bench/workloads/train_ddp.py --model 1m --steps 100 --out DIR
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import json
import os
import runpy
import sys
import time
from typing import Any, Callable

from ddpcheck.run.rank import fingerprint, session as session_mod

TOTALS: dict[str, list[float]] = {}


PROFILER = cProfile.Profile() if os.environ.get("PROFILE_STEP_CPROFILE") else None


def timed(name: str, fn: Callable[..., Any], profile: bool = False) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if profile and PROFILER is not None and os.environ.get("PROFILE_STEP_CPROFILE") != "all":
            PROFILER.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                PROFILER.disable()
        c, w = time.thread_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            row = TOTALS.setdefault(name, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += time.thread_time() - c
            row[2] += time.perf_counter() - w
    return wrapper


original_guard = session_mod.guard


def guard(fn: Callable[..., None], *args: Any) -> None:
    name = getattr(fn, "__qualname__", repr(fn))
    module = getattr(fn, "__module__", "") or ""
    timed(f"{module.rsplit('.', 1)[-1]}.{name}", lambda: original_guard(fn, *args))()


session_mod.guard = guard  # type: ignore[assignment]
for method in ("before_optimizer_step", "after_optimizer_step", "exchange", "finish_exchange", "flush"):
    setattr(session_mod.Session, method, timed(f"Session.{method}", getattr(session_mod.Session, method),
                                               method.endswith("optimizer_step")))
fingerprint.fingerprints = timed("fingerprints", fingerprint.fingerprints)  # type: ignore[assignment]


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each of this process's threads, by name (Linux: schedstat is in ns)."""
    out: dict[str, float] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                name = fh.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                ns = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        name = "main" if int(tid) == os.getpid() else name
        out[name] = out.get(name, 0.0) + ns / 1e9
    return out


def arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


WARMUP, STEPS = arg("--warmup", 20), arg("--steps", 100)
SNAPSHOTS: dict[str, dict[str, float]] = {}


def count_steps() -> None:
    """Per-thread CPU at the end of the workload's warm-up and of its timed steps (the workload's
    own window), from a global optimizer post-hook registered after ddpcheck's."""
    import torch  # ddpcheck instruments here, as when the workload imports torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    taken = [0]

    def after(*_: Any) -> None:
        taken[0] += 1
        if taken[0] in (WARMUP, WARMUP + STEPS):
            SNAPSHOTS["start" if taken[0] == WARMUP else "end"] = thread_cpu()

    register_optimizer_step_post_hook(after)
    if os.environ.get("PROFILE_STEP_SUM"):
        reference_sums()
    del torch


def reference_sums() -> None:
    """`torch.sum` of the gradients at the optimizer step's start, in the job itself (the same
    cache and load as ddpcheck's fingerprint of them): from a pre-hook that runs before ddpcheck's
    on odd steps and after it on even ones, so that each reads the freshly written gradients half
    of the time. Adds its work to the step: not for the thread rows."""
    import torch
    from torch.optim import optimizer as optim_mod

    def make(first: bool) -> Callable[..., None]:
        timer = timed("reference: torch.sum of the gradients", lambda grads: torch.stack(
            [g.sum() for g in grads]).tolist())
        seen = [0]

        def pre(opt: Any, *_: Any) -> None:
            seen[0] += 1
            if (seen[0] % 2 == 1) == first:
                timer([p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None])
        return pre

    front = optim_mod.register_optimizer_step_pre_hook(make(True))
    optim_mod.register_optimizer_step_pre_hook(make(False))
    optim_mod._global_optimizer_pre_hooks.move_to_end(front.id, last=False)


def dump() -> None:
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "."
    window = {}
    if len(SNAPSHOTS) == 2:
        window = {k: (v - SNAPSHOTS["start"].get(k, 0.0)) / STEPS for k, v in SNAPSHOTS["end"].items()}
    with open(os.path.join(out, f"profile-rank{os.environ.get('RANK', '0')}.json"), "w") as fh:
        json.dump({**TOTALS, "thread_cpu_per_timed_step": window}, fh, indent=1, sort_keys=True)
    if PROFILER is not None:
        PROFILER.dump_stats(os.path.join(out, f"profile-rank{os.environ.get('RANK', '0')}.prof"))


atexit.register(dump)
count_steps()
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
if os.environ.get("PROFILE_STEP_CPROFILE") == "all":  # the whole workload under cProfile
    assert PROFILER is not None
    PROFILER.runcall(runpy.run_path, script, run_name="__main__")
else:
    runpy.run_path(script, run_name="__main__")
