"""CUDA emulated on the CPU (ddpcheck/run/rank/emulate.py, installed by every rank when the launcher
turned it on): what the user's code asked of it, said once during the run and as a finding after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpcheck.findings import Severity
from ddpcheck.run.records import Record, section
from ddpcheck.run.registry import Incident, Probe
from ddpcheck.run.verdict import FAIL, Context, Verdict

if TYPE_CHECKING:
    from ddpcheck.run.rank.session import Session

NAME = "emulation"  # record section: {"used": [...]} when the emulation did something


class CudaEmulated(Incident):
    """The script ran with CUDA emulated on the CPU (`--cpu`, or no CUDA device on this machine).

    ddpcheck says so because what it checked is the logic of the job — sharding, seeding,
    gradient and parameter sync, collectives — not its speed or memory. Emulated: `nccl` → `gloo`
    (`init_process_group`, `new_group`); `torch.cuda.is_available()` is True and `device_count()`
    is the number of ranks on the node (or `--nproc` for a script that spawns its own workers);
    `set_device`, `synchronize`, `empty_cache`, `torch.cuda.device(...)` and the CUDA seeding calls
    do nothing; DDP's `device_ids`/`output_device` are dropped; every CUDA device argument
    (`device=rank`, `"cuda:1"`, `torch.device("cuda", i)`, `.to(...)`, `.cuda()`) means the CPU.
    Not emulated: see DDP121. The final weights equal those of the same script written for CPUs.

    ## Why it matters

    A green report from an emulated run says nothing about GPU memory, NCCL behaviour or speed.

    ## How to fix

    Nothing to fix. Pass `--cpu` to emulate on a machine that has GPUs too.
    """

    code = "DDP122"
    name = "cuda-emulated"
    severity = Severity.INFO
    hint = "timings and memory of an emulated run do not apply to GPUs"


def capture(session: Session) -> None:
    from ddpcheck.run.rank import emulate

    if not emulate.enabled():
        return
    used = session.section(NAME)
    used["used"] = []

    def said(feature: str) -> None:
        used["used"] = sorted(emulate.USED)
        if session.under_launcher or session.spawn_parent:  # once per job, not per worker
            session.progress("no CUDA device here: CUDA calls are emulated on the CPU (nccl → gloo)")

    setattr(emulate, "on_first_use", said)
    session.at_end.append(lambda why: used.update(used=sorted(emulate.USED)))


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    used = sorted({f for r in records for f in section(r, NAME).get("used", [])})
    if not used:
        return []
    message = ("ran the GPU script on the CPU with CUDA emulated (" + ", ".join(used)
               + "); timings and memory do not apply to GPUs")
    return [Verdict(CudaEmulated.code, FAIL, message, message=message, hint=False, details={"emulated": used})]


PROBE = Probe(NAME, (CudaEmulated,), judge, capture, order=4, always=True)
