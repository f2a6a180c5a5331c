from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.checks._diagnostic import Diagnostic


class CudaEmulated(Diagnostic):
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
