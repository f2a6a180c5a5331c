"""Will the job's processes fit in this machine's memory? Asked before anything is launched.

Every rank is a Python process that imports torch; ddpcheck's probes and the CUDA emulation add a
little. Measured on this project's 2-core, 23 GiB machine with torch 2.13 (CPU build), on a tiny
DDP model (bench/RESULTS.md, "How many ranks one machine holds"): about 305 MiB resident per
rank, 230 MiB per extra torchrun agent of `--nodes`. The user's model, data and DataLoader
workers come on top, so the estimate is a floor: a job refused here could not have run, and a
job let through may still need more. Torch-free; reads /proc/meminfo (Linux), and says nothing
where that cannot be read.
"""

from __future__ import annotations

import os

from ddpcheck.errors import UserError

RANK_MIB = 310  # one rank: torch imported, process group, ddpcheck's probes, a tiny model
AGENT_MIB = 230  # one more torchrun agent (`--nodes`: one per node after the first)
ENV_RANK_MIB = "DDPCHECK_RANK_MIB"  # a larger per-rank figure for a heavy script


def available_mib(meminfo: str = "/proc/meminfo") -> int | None:
    """The memory the kernel says can be given to new processes without swapping, in MiB."""
    try:
        with open(meminfo, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # no /proc (macOS): free pages undercount reclaimable cache, so this errs on the safe side
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (AttributeError, OSError, ValueError):
        return None


def rank_mib() -> int:
    value = os.environ.get(ENV_RANK_MIB, "")
    return int(value) if value.isdigit() and int(value) > 0 else RANK_MIB


def check(ranks: int, agents: int, available: int | None = None) -> None:
    """Refuse, in one line, a job whose `ranks` processes (and `agents` extra torchrun agents)
    need more memory than this machine has available."""
    free = available_mib() if available is None else available
    if free is None:
        return
    per_rank = rank_mib()
    need = ranks * per_rank + agents * AGENT_MIB
    if need <= free:
        return
    fits = max(0, free // per_rank)  # on one node, with no other agent
    agents_said = f" and {agents} more torchrun agent{'s' if agents != 1 else ''}" if agents else ""
    raise UserError(
        f"ddpcheck run: {ranks} ranks{agents_said} need at least {need / 1024:.1f} GiB "
        f"(about {per_rank} MiB per rank for torch and ddpcheck, before your model and data), and this "
        f"machine has {free / 1024:.1f} GiB available: nothing was started. Run at most {fits} ranks here "
        "(fewer --nproc or --nodes)")
