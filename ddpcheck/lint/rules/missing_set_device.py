from __future__ import annotations

import re

from ddpcheck.findings import Severity
from ddpcheck.lint.context import DDP, INIT_PROCESS_GROUP, CallSite
from ddpcheck.lint.names import last_name
from ddpcheck.lint.patterns import init_sites, is_cuda_string, is_entry_point, string_text
from ddpcheck.lint.rule import Rule

_SETS_DEVICE = {"torch.cuda.set_device", "torch.cuda.device"}
# `os.environ["CUDA_VISIBLE_DEVICES"] = ...` (a quoted key: prose in a docstring does not count).
_PINS_VISIBLE_DEVICES = re.compile(r"""['"]CUDA_VISIBLE_DEVICES['"]""")


class MissingSetDevice(Rule):
    """A DDP script uses CUDA but never calls `torch.cuda.set_device`, so every rank starts on GPU 0.

    ## Why it matters
    A process's current CUDA device is GPU 0 until it says otherwise. Everything that uses the
    current device — `.cuda()` without an index, NCCL's communicators for `barrier()` and object
    collectives, the CUDA context itself — then lands on GPU 0 for every rank. Users see
    `nvidia-smi` list all N processes on GPU 0, out-of-memory errors on GPU 0 only, and NCCL
    warnings such as "using GPU 0 to perform barrier as devices used by this process are currently
    unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect".

    Reported once, at the `init_process_group` call, when the file (or a helper of the project it
    calls) initialises the process group, uses CUDA (the `nccl` backend, `.cuda(...)`,
    `device_ids=`, a `"cuda..."` device), and nowhere calls `torch.cuda.set_device(...)`, enters
    `torch.cuda.device(...)`, passes `device_id=` to `init_process_group`, or pins the process
    with `CUDA_VISIBLE_DEVICES`. Helper modules that are only imported (no `__main__` guard, no
    work at module level) are not reported: the script that calls them may set the device.

    ## How to fix
    Right after reading the local rank, call `torch.cuda.set_device(local_rank)` (with torchrun:
    `local_rank = int(os.environ["LOCAL_RANK"])`), or pass
    `device_id=torch.device("cuda", local_rank)` to `init_process_group` (PyTorch 2.3+).

    ## References
    - https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html ("ensuring that each process exclusively works on a single GPU ... by calling torch.cuda.set_device(i)")
    - https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group
    - https://github.com/pytorch/examples/issues/969 (every process allocates memory on GPU 0)
    - https://github.com/NVIDIA/apex/issues/222
    """

    code = "DDP003"
    name = "missing-set-device"
    severity = Severity.WARNING
    MESSAGE = (
        "this DDP script uses CUDA but never calls `torch.cuda.set_device`: every rank starts on "
        "GPU 0; call `torch.cuda.set_device(local_rank)` before using the GPU"
    )

    VALID = [
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = DDP(model.cuda(), device_ids=[local_rank])
        """,
        """
        # device_id= binds the device at init (PyTorch 2.3+).
        import os, torch
        import torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        """,
        """
        # The device is set inside a helper of this file.
        import torch
        from torch import distributed as dist
        from torch.cuda import set_device as pin
        def setup(rank, world_size):
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            pin(rank)
        def main(rank, world_size):
            setup(rank, world_size)
            model = model.cuda(rank)
        if __name__ == "__main__":
            main(0, 1)
        """,
        """
        # CPU only: gloo and no CUDA.
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = model.to("cpu")
        """,
        """
        # A helper module: the scripts importing it may set the device themselves.
        import torch.distributed as dist
        def init_distributed():
            dist.init_process_group(backend="nccl")
        """,
        """
        # Each process sees only its own GPU.
        import os
        import torch.distributed as dist
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]
        dist.init_process_group("nccl")
        model = model.cuda()
        """,
    ]
    INVALID = [
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        model = DDP(model.to(f"cuda:{local_rank}"), device_ids=[local_rank])
        """,
        """
        import torch
        def main():
            torch.distributed.init_process_group(backend="gloo")
            model = torch.nn.parallel.DistributedDataParallel(net.cuda())
        if __name__ == "__main__":
            main()
        """,
    ]

    def finish(self) -> None:
        sites = init_sites(self.ctx)
        if not sites or not is_entry_point(self.ctx):
            return
        if any(c.qualname == INIT_PROCESS_GROUP and c.has_keyword("device_id") for c in sites):
            return
        if any(c.qualname in _SETS_DEVICE for c in self.ctx.calls) or _PINS_VISIBLE_DEVICES.search(self.ctx.source):
            return
        if not any(_uses_cuda(self.ctx, c) for c in self.ctx.calls):
            return
        # Last, as it costs a walk of the helpers' bodies: a helper of the project sets the device.
        if any(self.ctx.helper_does(c, "set_device") for c in self.ctx.calls if not (c.qualname or "").startswith("torch.")):
            return
        self.report(sites[0].node)


def _uses_cuda(ctx, call: CallSite) -> bool:
    if call.qualname == INIT_PROCESS_GROUP:
        backend = call.arg("backend", 0)
        if backend is not None:
            text = string_text(backend)
            return (text is not None and "nccl" in text.lower()) or last_name(backend) == "NCCL"
        return False
    if call.method == "cuda":
        return True
    if call.qualname == DDP and call.has_keyword("device_ids"):
        return True
    if call.qualname == "torch.device" or call.method == "to":
        first = call.arg("device", 0)
        if first is not None and is_cuda_string(first):
            return True
    device = call.arg("device")
    return device is not None and is_cuda_string(device)
