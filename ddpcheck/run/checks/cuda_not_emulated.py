from __future__ import annotations

from ddpcheck.findings import Severity
from ddpcheck.run.checks._diagnostic import Diagnostic


class CudaNotEmulatedCheck(Diagnostic):
    """The GPU script called a CUDA feature that `ddpcheck run --cpu` cannot emulate on a CPU.

    On a machine without CUDA, ddpcheck runs GPU scripts on the CPU: `nccl` becomes `gloo`, CUDA
    devices become the CPU, `set_device` and `synchronize` do nothing, DDP's `device_ids` are
    dropped. Some features have no honest CPU stand-in and stop the run at the call, naming it and
    your line: CUDA events and streams (`torch.cuda.Event`, `Stream`, `current_stream`),
    `Tensor.pin_memory()`, `torch.load(map_location="cuda...")`, `torch.set_default_device("cuda")`,
    autocast on `"cuda"` (on the CPU it would silently compute in float32), an enabled CUDA
    `GradScaler`, and device queries (`get_device_name`, `get_device_properties`, the memory
    statistics). `x.is_cuda` stays False under the emulation.

    ## Why it matters

    Emulating these would make the dry run lie: timings, precision or memory would not be those of
    the GPU job.

    ## How to fix

    Skip the call when the environment variable `DDPCHECK_EMULATE_CUDA` is `1` (ddpcheck sets it
    in every rank it emulates), load checkpoints with `map_location="cpu"`, or run on a GPU machine.
    """

    code = "DDP121"
    name = "cuda-not-emulated"
    severity = Severity.ERROR
    hint = 'skip the call when DDPCHECK_EMULATE_CUDA=1, or use map_location="cpu"; or run on a GPU'
    BAD = """
    start = torch.cuda.Event(enable_timing=True)  # stops `ddpcheck run --cpu` here
    """
    GOOD = """
    timing = not os.environ.get("DDPCHECK_EMULATE_CUDA")
    start = torch.cuda.Event(enable_timing=True) if timing else None
    """
