"""How a run is launched, decided before the launch: torchrun, or the plain interpreter for a
script that starts its own workers (`mp.spawn`); CUDA emulated or not (the ranks read it from the
environment, where the user's script can read it too).

A spawn-style script is found by reading it (with `ast`, never running it) for a call of `spawn`
/ `start_processes` from `torch.multiprocessing`. Under torchrun each rank would start a job of
its own on the same port and the run would hang silently; run plainly, its workers are
instrumented by the start-up hook in ddpcheck/run/rank/startup/.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ddpcheck.run.launcher.command_line import Launch
from ddpcheck.run.options import ENV_EMULATE, ENV_EMULATED_DEVICES, ENV_LAUNCHER_PID
from ddpcheck.run.verdict import SpawnSite

_SPAWNERS = {"spawn", "start_processes"}
_MODULE = "torch.multiprocessing"


@dataclass
class Plan:
    """How this run is launched; `interrupted` is set when Ctrl-C stopped it."""

    spawn_site: SpawnSite | None
    emulate: bool
    nproc_ignored: bool
    interrupted: bool = False
    saved_env: dict[str, str | None] = field(default_factory=dict)


def prepare(launch: Launch) -> Plan:
    """Decide emulation and spawn style, say so, and set what the ranks read from the environment."""
    options = launch.options
    site = None
    if launch.target.kind == "script":
        site = find_spawn(launch.target.name)
        if site is None and options.spawn:
            site = SpawnSite(launch.target.name, 1, "--spawn")
    import torch

    cpu = options.cpu or not torch.cuda.is_available()
    nproc_ignored = site is not None and options.nproc_given and not cpu
    plan = Plan(site, cpu, nproc_ignored)
    env: dict[str, str] = {ENV_LAUNCHER_PID: str(os.getpid())}
    if cpu:
        env[ENV_EMULATE] = "1"
        if site is not None:
            env[ENV_EMULATED_DEVICES] = str(launch.nproc)
    for key, value in env.items():
        plan.saved_env[key] = os.environ.get(key)
        os.environ[key] = value
    if site is not None and not options.quiet:
        note = (f"; --nproc {launch.nproc} is ignored" if nproc_ignored else
                (f"; {launch.nproc} emulated GPUs" if cpu else ""))
        print(f"ddpcheck: {os.path.basename(site.path)}:{site.line} starts its own workers ({site.call}): "
              f"running it with the plain interpreter{note}", file=sys.stderr, flush=True)
    return plan


def restore_environment(plan: Plan) -> None:
    for key, value in plan.saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def find_spawn(script: str | os.PathLike[str]) -> SpawnSite | None:
    """The first `torch.multiprocessing.spawn`/`start_processes` call in the script, if any."""
    try:
        source = Path(script).read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
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
            return SpawnSite(str(script), node.lineno, text)
    return None
