"""What went wrong with the run itself (DDP120–DDP139): crashes, hangs, Ctrl-C, CUDA emulation and
spawn-style scripts. Two halves:

- `install(session)`, in every rank once torch is imported (before the checks' own hooks): CUDA
  emulation when asked for, the hang ledger and watchdog, the spawn guard, and the capture of
  the exception a rank dies of into its record;
- `findings(...)` and `print_section(...)`, in the launcher process after the job: the records
  and torchrun's exit codes become Findings, shown after the checks' table and in the report.
"""

from __future__ import annotations

import os
import sys

from ddpcheck.findings import Finding

EMULATION = "emulation"  # record section: {"used": [...]} when the emulation did something


def install(session) -> None:
    from ddpcheck.run import crash, emulate, spawn
    from ddpcheck.run.probes import hangs

    if emulate.enabled():
        emulate.install()
        section = session.section(EMULATION)
        section["used"] = []

        def said(feature: str) -> None:
            section["used"] = sorted(emulate.USED)
            from ddpcheck.run import spawn_startup

            if session.under_launcher or spawn_startup.is_parent():  # once per job, not per worker
                session.progress("no CUDA device here: CUDA calls are emulated on the CPU (nccl → gloo)")

        emulate.on_first_use = said
        session.at_end.append(lambda why: section.update(used=sorted(emulate.USED)))
    if not session.under_launcher:
        session.before_init.insert(0, lambda kwargs: _adopt_identity(session, kwargs))
    hangs.install(session)
    if session.under_launcher:
        spawn.install_guard()

    finish = session.finish
    nodes = _NodeRecords(session)

    def finish_and_say_why(exit_code: int, error: BaseException | None = None) -> None:
        if error is not None:
            described = crash.describe(error, session.rank)
            if described:
                session.section(crash.SECTION).update(described)
        finish(exit_code, error)
        nodes.share()

    session.finish = finish_and_say_why


class _NodeRecords:
    """Several nodes: each rank's record also reaches the node that holds global rank 0, through
    the job's rendezvous store, so that this node judges across every rank of every node. The
    store is kept from init_process_group on (the default group is gone by the end)."""

    KEY = "ddpcheck/records/"
    WAIT_S = 30.0  # how long rank 0 waits at its end for the other nodes' records

    def __init__(self, session) -> None:
        self.session = session
        self.store = None
        self.world = _env_int("WORLD_SIZE", 1)
        self.local = _env_int("LOCAL_WORLD_SIZE", self.world)
        if session.under_launcher and self.world > self.local:
            session.after_init.append(self.keep_store)

    def keep_store(self) -> None:
        import torch.distributed as dist

        store = dist.distributed_c10d._get_default_store()
        try:
            store = store.clone()
        except Exception:  # noqa: BLE001 - a store that cannot clone is still usable
            pass
        self.store = store

    def share(self) -> None:
        if self.store is None:
            return
        import json
        from datetime import timedelta

        session = self.session
        first_local = session.rank - session.local_rank  # ranks of a node are contiguous
        try:
            if first_local != 0:
                self.store.set(self.KEY + str(session.rank), json.dumps(session.snapshot(), default=str))
            elif session.rank == 0 and session.options.record_dir:
                keys = [self.KEY + str(r) for r in range(self.local, self.world)]
                try:
                    self.store.wait(keys, timedelta(seconds=self.WAIT_S))
                except Exception:  # noqa: BLE001 - a node that never finished: judge without it
                    pass
                for rank, key in zip(range(self.local, self.world), keys):
                    if self.store.check([key]):
                        path = os.path.join(session.options.record_dir, f"rank-{rank}.json")
                        with open(path + ".tmp", "wb") as fh:
                            fh.write(self.store.get(key))
                        os.replace(path + ".tmp", path)
        except Exception as exc:  # noqa: BLE001 - never fail the rank over the report
            print(f"ddpcheck: could not share the records across nodes: {exc}", file=sys.stderr)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _adopt_identity(session, kwargs: dict) -> None:
    """A worker that a spawn-style script started learns its rank from init_process_group's
    arguments, not from torchrun's environment."""
    rank, world = kwargs.get("rank"), kwargs.get("world_size")
    if isinstance(rank, int) and rank >= 0:
        session.rank = session.meta["rank"] = rank
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("LOCAL_RANK", str(rank))
        if session.options.record_dir:
            session.record_path = os.path.join(session.options.record_dir, f"rank-{rank}.json")
    if isinstance(world, int) and world > 0:
        session.world_size = session.meta["world_size"] = world
        os.environ.setdefault("WORLD_SIZE", str(world))


# --- in the launcher process ---------------------------------------------------------------


def _finding(check, message: str, hint: bool = True, **kw) -> Finding:
    return Finding(code=check.code, name=check.name, message=message, severity=check.severity,
                   hint=check.hint if hint else None, **kw)


def findings(record_dir: str, records: list[dict], exit_codes: dict[int, int], *,
             interrupted: bool = False, spawn_site=None, nproc_ignored: bool = False) -> list[Finding]:
    from ddpcheck.run import crash
    from ddpcheck.run.checks.cuda_emulated import CudaEmulated
    from ddpcheck.run.checks.interrupted import Interrupted
    from ddpcheck.run.checks.spawn_style_script import SpawnStyleScript
    from ddpcheck.run.probes import hangs

    out: list[Finding] = []
    if interrupted:
        steps = max([r.get("step", 0) for r in records] or [0])
        out.append(_finding(Interrupted, f"interrupted after {steps} optimizer step(s); every rank was "
                            "stopped and this report covers only what ran"))
    hang = hangs.hang_findings(record_dir)
    out += hang
    if not hang and not interrupted:
        out += crash.crash_findings(records, exit_codes)
    if spawn_site is not None:
        extra = "; --nproc was ignored (the script chooses its own number of processes)" if nproc_ignored else ""
        said = spawn_site.call == "--spawn"
        how = "as --spawn says" if said else (f"{spawn_site.call} at {os.path.basename(spawn_site.path)}:"
                                               f"{spawn_site.line}")
        out.append(_finding(SpawnStyleScript, f"the script starts its own workers ({how}); ddpcheck ran it "
                            f"with the plain interpreter and checked the workers{extra}",
                            path=spawn_site.path, line=None if said else spawn_site.line, hint=nproc_ignored))
    used = sorted({f for r in records for f in r.get("probes", {}).get(EMULATION, {}).get("used", [])})
    if used:
        out.append(_finding(CudaEmulated, "ran the GPU script on the CPU with CUDA emulated ("
                            + ", ".join(used) + "); timings and memory do not apply to GPUs",
                            hint=False, details={"emulated": used}))
    return out


def node_note(records: list[dict]) -> str | None:
    """On a node without global rank 0: which ranks ran here, and who has the verdicts."""
    ranks = sorted(r.get("rank", 0) for r in records)
    world = max([r.get("world_size", 1) for r in records] or [1])
    several_nodes = any(r.get("rank") != r.get("local_rank") for r in records)
    if not several_nodes or not ranks or 0 in ranks:
        return None
    if len(ranks) == 1:
        span = f"rank {ranks[0]}"
    elif ranks == list(range(ranks[0], ranks[-1] + 1)):
        span = f"ranks {ranks[0]}–{ranks[-1]}"
    else:
        span = "ranks " + ", ".join(map(str, ranks))
    return (f"ddpcheck: this node ran {span} of {world}; the verdicts across all ranks are "
            "printed by the node that holds rank 0")


def print_section(found: list[Finding], stream=None, records: list[dict] | None = None) -> None:
    note = node_note(records or [])
    if note:
        print(note, file=stream or sys.stdout)
    if not found:
        return
    from rich.console import Console

    stream = stream or sys.stdout
    from rich.markup import escape

    console = Console(file=stream, highlight=False, soft_wrap=True)
    colour = {"error": "bold red", "warning": "yellow", "info": "cyan"}
    for f in found:
        where = f" {_relative(f.path)}:{f.line}" if f.path and f.line else (f" {_relative(f.path)}" if f.path else "")
        console.print(f"[{colour[f.severity.value]}]{f.code}[/] [bold]{f.name}[/]{escape(where)}: "
                      f"{escape(f.message)}")
        if f.hint:
            console.print(f"  [cyan]fix:[/] {escape(f.hint)}")


class Plan:
    """How this run is launched, as far as issue 5 is concerned (decided before the launch)."""

    def __init__(self, spawn_site, emulate: bool, nproc_ignored: bool) -> None:
        self.spawn_site = spawn_site
        self.emulate = emulate
        self.nproc_ignored = nproc_ignored
        self.interrupted = False
        self.saved_env: dict[str, str | None] = {}


def prepare(launch) -> Plan:
    """Decide emulation and spawn style, say so, and set what the ranks read from the environment."""
    from ddpcheck.run import emulate, spawn
    from ddpcheck.run.probes import hangs

    extra = launch.options.extra or {}
    site = None
    if launch.target.kind == "script":
        site = spawn.find_spawn(launch.target.name)
        if site is None and extra.get("spawn"):
            site = spawn.SpawnSite(launch.target.name, 1, "--spawn")
    import torch

    cpu = bool(extra.get("cpu")) or not torch.cuda.is_available()
    nproc_ignored = site is not None and bool(extra.get("nproc_given")) and not cpu
    plan = Plan(site, cpu, nproc_ignored)
    env = {hangs.ENV_TIMEOUT: str(extra.get("hang_timeout", hangs.DEFAULT_TIMEOUT_S)),
           hangs.ENV_COLLECTIVE_TIMEOUT: str(extra.get("collective_timeout", 0))}
    if cpu:
        env[emulate.ENV_FLAG] = "1"
        if site is not None:
            env[emulate.ENV_DEVICES] = str(launch.nproc)  # what torch.cuda.device_count() says
    for key, value in env.items():
        plan.saved_env[key] = os.environ.get(key)
        os.environ[key] = value
    if site is not None and not launch.options.quiet:
        note = (f"; --nproc {launch.nproc} is ignored" if nproc_ignored else
                (f"; {launch.nproc} emulated GPUs" if cpu else ""))
        print(f"ddpcheck: {os.path.basename(site.path)}:{site.line} starts its own workers ({site.call}): "
              f"running it with the plain interpreter{note}", file=sys.stderr, flush=True)
    return plan


def run(launch, plan: Plan):
    """Run the job (torchrun, or the plain interpreter for a spawn-style script); Ctrl-C stops
    every rank and is remembered, never raised."""
    from ddpcheck.run import launcher, spawn
    from ddpcheck.run.options import CONFIG_ENV

    try:
        if plan.spawn_site is None:
            return launcher.run_job(launch)
        env = dict(os.environ)
        env[CONFIG_ENV] = launch.options.to_env()
        code, plan.interrupted = spawn.run_plain(launch.target.name, list(launch.target.args), env)
        return launcher.JobResult(code == 0, {} if code == 0 else {0: code})
    except KeyboardInterrupt:
        plan.interrupted = True
    except Exception as exc:  # torchrun's SignalException (SIGINT/SIGTERM to this process)
        if type(exc).__name__ != "SignalException":
            raise
        plan.interrupted = True
    finally:
        for key, value in plan.saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return launcher.JobResult(False, {})


def script_exit_code(found: list[Finding], code: int) -> int:
    """The script's own exit code, unless ddpcheck ended the ranks itself (a hang, Ctrl-C)."""
    return 0 if {f.code for f in found} & {"DDP123", "DDP124"} else code


def exit_code(found: list[Finding], default: int) -> int:
    """130 after Ctrl-C (as a shell says it); 1 for a hang (the ranks' own exit codes are ours);
    otherwise what the checks decided."""
    codes = {f.code for f in found}
    if "DDP124" in codes:
        return 130
    if "DDP123" in codes:
        return 1
    return default


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel
