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

    Said only of a script that used CUDA: one that never asks for it sees torch as it is (see
    "what the script sees" below) and is reported as the CPU job it is.

    ddpcheck says so because what it checked is the logic of the job — sharding, seeding,
    gradient and parameter sync, collectives — not its speed or memory. Each rank is one GPU of a
    node with as many GPUs as ranks (`--nproc`, also for a script that `mp.spawn`s
    `torch.cuda.device_count()` workers), and every CUDA device is the CPU:

    - devices: `.to(i)`, `.to(f"cuda:{i}")`, `.cuda(i)`, `torch.device(i)`, `device=i` in factory
      functions, DDP's `device_ids=[i]`, `map_location=f"cuda:{i}"`, `set_default_device("cuda")`;
      `pin_memory` (also `DataLoader(pin_memory=True)`) and `non_blocking` copies are plain ones;
    - `torch.cuda`: `is_available`, `device_count`, `current_device`, `set_device`, `device(...)`,
      `get_device_name`, `get_device_properties` (name, `total_memory` 16 GiB, compute capability
      8.0, 108 multiprocessors), `get_device_capability`, `is_bf16_supported`, `synchronize`,
      `empty_cache`, the memory statistics (0: nothing is allocated on a GPU), `Event` (timing on
      the host clock), `Stream` / `current_stream` / `stream()`, `manual_seed(_all)` (CUDA tensors
      draw from the CPU generator), `get_rng_state`, `nvtx`;
    - `torch.accelerator`: `is_available`, `device_count`, `current_accelerator` (cuda),
      `set_device_index`, `current_device_index`, `device_index`, `synchronize`;
    - AMP: `torch.autocast("cuda")`, `torch.amp.autocast("cuda", dtype=...)` and
      `torch.cuda.amp.autocast` run CPU autocast with the same dtype; a CUDA `GradScaler` is a CPU
      one (it scales, unscales and skips steps on inf/nan);
    - `torch.distributed`: `nccl` → `gloo` (`init_process_group`, `new_group`; the backend
      `get_default_backend_for_device` names), `init_process_group(device_id=...)` and
      `barrier(device_ids=...)` are accepted.

    What the script sees: the questions asked before any CUDA use (`torch.cuda.is_available()`,
    `device_count()`, `is_bf16_supported()`, the same of `torch.accelerator`) get the emulated
    answer only when the script has used CUDA already, when the statement asking requires it
    (`assert torch.cuda.is_available()`, or an `if` whose "no CUDA" branch raises, exits or
    returns), or when its own source is written for CUDA (it names "cuda" or "nccl", calls
    `.cuda()`, passes `device_ids=`, sets the CUDA device). A CPU-only script is told the truth.

    torch's own code (the DataLoader, `torch.compile`, the GradScaler) is told the truth, that
    there is no GPU, so it keeps to its CPU paths. What cannot be emulated: see DDP121. The final
    weights equal those of the same script written for CPUs.

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
    # Pinned memory alone (a CPU script's DataLoader(pin_memory=True)) is not a GPU script.
    session.at_end.append(lambda why: used.update(used=sorted(emulate.USED) if emulate.active() else []))


def judge(records: list[Record], ctx: Context) -> list[Verdict]:
    used = sorted({f for r in records for f in section(r, NAME).get("used", [])})
    if not used:
        return []
    message = ("ran the GPU script on the CPU with CUDA emulated (" + ", ".join(used)
               + "); timings and memory do not apply to GPUs")
    return [Verdict(CudaEmulated.code, FAIL, message, message=message, hint=False, details={"emulated": used})]


PROBE = Probe(NAME, (CudaEmulated,), judge, capture, order=4, always=True)
