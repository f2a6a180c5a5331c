"""How a run is launched, decided before the launch: torchrun, or the plain interpreter for a
script that starts its own workers (`mp.spawn`); CUDA emulated or not (the ranks read it from the
environment, where the user's script can read it too).

A spawn-style script is found by reading it (with `ast`, never running it) for a call of `spawn`
/ `start_processes` from `torch.multiprocessing`. Under torchrun each rank would start a job of
its own on the same port and the run would hang silently; run plainly, its workers are
instrumented by the start-up hook in ddpcheck/run/rank/startup/.

Many scripts run either way: `if args.spawn: mp.spawn(...)` else they are one rank of a torchrun
job and read `LOCAL_RANK` (run plainly, that branch dies with KeyError: 'LOCAL_RANK'). A script
whose spawn call is on one branch only and that also reads the launcher's variables from the
environment is launched with torchrun, with a fallback: when a rank calls the spawn before
`init_process_group`, it leaves quietly (rank/spawn.py), and the launcher runs the script again
with the plain interpreter (`spawn_requested`). A conditional spawn in a script that never reads
the launcher's environment (hifi-gan's `if num_gpus > 1: mp.spawn(...) else: train(0)`) is run
plainly, as any spawn-style script.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ddpcheck.errors import UserError
from ddpcheck.run import flight_recorder
from ddpcheck.run.launcher.command_line import Launch
from ddpcheck.run.run_options import ENV_EMULATE, ENV_EMULATED_DEVICES, ENV_LAUNCHER_PID, ENV_SPAWN_FALLBACK
from ddpcheck.run.records import Record
from ddpcheck.run.verdict import SpawnSite

_SPAWNERS = {"spawn", "start_processes"}
_MODULE = "torch.multiprocessing"
LAUNCHER_VARIABLES = frozenset({"LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})


@dataclass
class Plan:
    """How this run is launched; `interrupted` is set when Ctrl-C stopped it."""

    spawn_site: SpawnSite | None
    emulate: bool
    nproc_ignored: bool
    interrupted: bool = False
    saved_env: dict[str, str | None] = field(default_factory=dict)
    # A dual-mode script launched with torchrun: where it spawns, should a rank take that branch.
    fallback: SpawnSite | None = None
    # The folder ddpcheck made for the ranks' Flight Recorder dumps (None: the user chose one).
    flight_recorder_folder: str | None = None


def prepare(launch: Launch, switch_to: SpawnSite | None = None) -> Plan:
    """Decide emulation and spawn style, say so, and set what the ranks read from the environment.
    `switch_to`: run the script plainly after all (a rank of the torchrun job called its spawn)."""
    options = launch.options
    site, fallback = switch_to, None
    if site is None and launch.target.kind == "script":
        found = scan_spawn(launch.target.name)
        if found is not None and found.dual and not options.spawn and launch.nnodes_max == 1:
            fallback = found.site
        elif found is not None:
            site = found.site
        elif options.spawn:
            site = SpawnSite(launch.target.name, 1, "--spawn")
    if site is not None and launch.nodes > 1:
        raise UserError(f"ddpcheck run: {os.path.basename(site.path)}:{site.line} starts its own workers "
                        f"({site.call}), which --nodes cannot place on emulated nodes; drop --nodes, or "
                        "make the script read LOCAL_RANK/RANK/WORLD_SIZE from the launcher")
    import torch

    cpu = options.cpu or not torch.cuda.is_available()
    nproc_ignored = site is not None and options.nproc_given and not cpu
    plan = Plan(site, cpu, nproc_ignored, fallback=fallback)
    env: dict[str, str] = {ENV_LAUNCHER_PID: str(os.getpid())}
    if cpu:
        env[ENV_EMULATE] = "1"
        if site is not None:
            env[ENV_EMULATED_DEVICES] = str(launch.nproc)
    if fallback is not None:
        env[ENV_SPAWN_FALLBACK] = "1"
    fr_env, plan.flight_recorder_folder = flight_recorder.environment()
    env.update(fr_env)
    for key, value in env.items():
        plan.saved_env[key] = os.environ.get(key)
        os.environ[key] = value
    if options.quiet:
        return plan
    if not cpu and site is None and launch.nproc * launch.nodes > torch.cuda.device_count():
        # NCCL refuses two ranks of one communicator on one device ("Duplicate GPU detected"),
        # and a gloo script is unaffected: a note, not a finding.
        print(f"ddpcheck: {launch.nproc * launch.nodes} ranks on {torch.cuda.device_count()} CUDA "
              "device(s): a script that gives each rank its own GPU will fail or share one; "
              "pass --cpu to emulate one GPU per rank on the CPU", file=sys.stderr, flush=True)
    if fallback is not None:
        print(f"ddpcheck: {os.path.basename(fallback.path)}:{fallback.line} starts its own workers "
              f"({fallback.call}) on one branch only, and the script reads the launcher's environment: "
              "running it with torchrun (and with the plain interpreter if a rank calls the spawn)",
              file=sys.stderr, flush=True)
    elif site is not None:
        note = (f"; --nproc {launch.nproc} is ignored" if nproc_ignored else
                (f"; {launch.nproc} emulated GPUs" if cpu else ""))
        again = "again " if site.switched else ""
        print(f"ddpcheck: {os.path.basename(site.path)}:{site.line} starts its own workers ({site.call}): "
              f"running it {again}with the plain interpreter{note}", file=sys.stderr, flush=True)
    return plan


def spawn_requested(plan: Plan, records: list[Record]) -> SpawnSite | None:
    """After a dual-mode script's torchrun job: the site to run it plainly from, when the ranks
    took the spawn branch before init_process_group (and left for it, rank/spawn.py). A rank the
    launcher stopped before it got there (the first rank to leave ends the job; a stopped rank
    writes its record as it goes) runs the same script with the same arguments: it counts with
    the others, but at least one rank must have called the spawn."""
    if plan.fallback is None or plan.interrupted or not records:
        return None
    if not any(r.get("spawn_called") for r in records):
        return None
    if not all(r.get("spawn_called") or r.get("stopped") for r in records):
        return None
    return replace(plan.fallback, switched=True)


def restore_environment(plan: Plan) -> None:
    for key, value in plan.saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@dataclass(frozen=True)
class SpawnScan:
    """What reading the script says about how it starts its workers."""

    site: SpawnSite
    conditional: bool  # the spawn is on one branch of an `if` (or in a function only called there)
    reads_launcher_env: bool  # it reads LOCAL_RANK / RANK / WORLD_SIZE from the environment

    @property
    def dual(self) -> bool:
        """It runs either way: spawning on one branch, as a torchrun rank on the other."""
        return self.conditional and self.reads_launcher_env


def find_spawn(script: str | os.PathLike[str]) -> SpawnSite | None:
    """The first `torch.multiprocessing.spawn`/`start_processes` call in the script, if any."""
    found = scan_spawn(script)
    return found.site if found is not None else None


def scan_spawn(script: str | os.PathLike[str]) -> SpawnScan | None:
    """The first spawn call in the script, whether it is conditional, and whether the script
    reads the launcher's environment."""
    try:
        source = Path(script).read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    call = _spawn_call(tree)
    if call is None:
        return None
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    site = SpawnSite(str(script), call.lineno, ast.unparse(call.func))
    return SpawnScan(site, _conditional(call, parents, tree), _reads_launcher_env(tree))


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def _branch(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """`node` is on one branch of an `if` (other than the `__main__` guard) or in an except clause."""
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test and not _is_main_guard(parent.test):
            return True
        if isinstance(parent, ast.ExceptHandler):
            return True
        child, parent = parent, parents.get(parent)
    return False


def _conditional(call: ast.Call, parents: dict[ast.AST, ast.AST], tree: ast.Module) -> bool:
    if _branch(call, parents):
        return True
    function = parents.get(call)
    while function is not None and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = parents.get(function)
    if function is None:
        return False
    name = function.name  # a launcher function: is it called on one branch only?
    callers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id == name]
    return bool(callers) and all(_branch(c, parents) for c in callers)


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _launcher_variable(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in LAUNCHER_VARIABLES


def _reads_launcher_env(tree: ast.Module) -> bool:
    """os.environ["LOCAL_RANK"], os.environ.get("RANK"), os.getenv("WORLD_SIZE"), "RANK" in os.environ."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value) and _launcher_variable(node.slice):
            return True
        if isinstance(node, ast.Call) and node.args and _launcher_variable(node.args[0]):
            func = node.func
            if isinstance(func, ast.Attribute) and (func.attr == "getenv" or (
                    func.attr in ("get", "pop", "setdefault") and _is_environ(func.value))):
                return True
            if isinstance(func, ast.Name) and func.id == "getenv":
                return True
        if isinstance(node, ast.Compare) and _launcher_variable(node.left) and any(
                isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and _is_environ(node.comparators[0]):
            return True
    return False


def _spawn_call(tree: ast.Module) -> ast.Call | None:
    modules: set[str] = set()  # local names bound to torch.multiprocessing
    functions: set[str] = set()  # local names bound to its spawn/start_processes
    torch_names: set[str] = set()  # local names bound to torch itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == _MODULE or alias.name.startswith(_MODULE + "."):
                    if alias.asname:
                        modules.add(alias.asname)
                    else:
                        torch_names.add("torch")
                elif alias.name == "torch":
                    torch_names.add(alias.asname or "torch")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.module == "torch" and alias.name == "multiprocessing":
                    modules.add(alias.asname or alias.name)
                elif node.module.startswith(_MODULE) and alias.name in _SPAWNERS:
                    functions.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        text = ast.unparse(node.func)
        func = node.func
        hit = (isinstance(func, ast.Name) and func.id in functions) or (
            isinstance(func, ast.Attribute)
            and func.attr in _SPAWNERS
            and (
                (isinstance(func.value, ast.Name) and func.value.id in modules)
                or any(text.startswith(f"{t}.multiprocessing.") for t in torch_names)
            )
        )
        if hit:
            return node
    return None
