"""Run a script written for CUDA GPUs on a CPU-only machine (`ddpcheck run --cpu`).

Installed inside every rank before the user's script starts, only when emulation is on
(`DDPCHECK_EMULATE_CUDA=1`, set by the launcher for `--cpu` or when this machine has no CUDA
device). What is emulated — each piece was needed for a real torchrun-style GPU script:

- `torch.cuda.is_available()` is True and `device_count()` is the number of emulated devices
  (the ranks on this node, or `--nproc` for scripts that start their own processes);
- `set_device`, `synchronize`, `empty_cache` and `torch.cuda.device(...)` do nothing;
  `current_device()` returns the device last set;
- the `nccl` backend becomes `gloo` (`init_process_group`, `new_group`), `device_id=` is dropped;
- DDP's `device_ids` / `output_device` are dropped for modules whose parameters are on the CPU;
- every CUDA device argument (`device=rank`, `"cuda:1"`, `torch.device("cuda", i)`) becomes the CPU,
  `Tensor.to(<cuda device>)` stays on the CPU, `Tensor.cuda()` returns the tensor itself. This is
  a `TorchFunctionMode`, which is thread-local: threads the script starts itself are not covered.

What is not emulated fails at the call with `CudaNotEmulated`, a clear one-line message naming the
call and the user's file:line (reported as DDP121): CUDA events and streams, `pin_memory()`,
`torch.load(map_location=<cuda>)`, `set_default_device("cuda")`, autocast on "cuda" (it would
silently stay float32), an enabled CUDA `GradScaler`, and device queries such as
`get_device_name` or the memory statistics. `x.is_cuda` stays False.
"""

from __future__ import annotations

import functools
import os
import sys

from ddpcheck.run.options import ENV_EMULATE as ENV_FLAG
from ddpcheck.run.options import ENV_EMULATED_DEVICES as ENV_DEVICES
from ddpcheck.run.rank.sites import call_site, is_user_file

_installed = False
_current_device = 0
USED: set[str] = set()  # what the user's code actually asked of the emulation, for the report
on_first_use = None  # callable(feature), set by the rank's session to say it once


def _used(feature: str) -> None:
    if feature not in USED:
        USED.add(feature)
        if on_first_use is not None and len(USED) == 1:
            try:
                on_first_use(feature)
            except Exception:  # noqa: BLE001 - saying so must never break the run
                pass


def _from_user() -> bool:
    return is_user_file(sys._getframe(2).f_code.co_filename)


class CudaNotEmulated(RuntimeError):
    """A CUDA feature that ddpcheck's CPU emulation cannot stand in for; the message says where."""

    def __init__(self, call: str, where: str | None, why: str = "") -> None:
        self.call = call
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(
            f"ddpcheck --cpu: {call}{at} is not emulated on CPU{': ' + why if why else ''}. "
            "Run this part on a GPU machine, or skip it when the environment variable "
            f"{ENV_FLAG} is set."
        )


def enabled() -> bool:
    return os.environ.get(ENV_FLAG) == "1"


def _is_cuda(device) -> bool:
    import torch

    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    # A bare int is a CUDA ordinal wherever torch accepts a device (torch.randn(..., device=rank)).
    return isinstance(device, int) and not isinstance(device, bool)


def emulated_device_count() -> int:
    for var in (ENV_DEVICES, "LOCAL_WORLD_SIZE"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def _not_emulated(call: str, why: str = ""):
    def refuse(*args, **kwargs):
        raise CudaNotEmulated(call, call_site(), why)

    refuse.__name__ = call.rsplit(".", 1)[-1]
    refuse.__ddpcheck_refuses__ = call
    return refuse


def _make_mode():
    import torch
    from torch.overrides import TorchFunctionMode

    cpu = torch.device("cpu")
    to = torch.Tensor.to
    cuda = torch.Tensor.cuda
    pin = torch.Tensor.pin_memory

    class CudaOnCpu(TorchFunctionMode):
        """Rewrites CUDA device arguments to the CPU for every torch call in this thread."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is cuda:
                _used(".cuda()")
                return args[0]
            if func is pin:
                raise CudaNotEmulated("Tensor.pin_memory()", call_site(), "there is no pinned memory without CUDA")
            if "device" in kwargs and _is_cuda(kwargs["device"]):
                _used("CUDA device arguments")
                kwargs = dict(kwargs, device=cpu)
            if func is to and len(args) > 1 and _is_cuda(args[1]):
                _used("CUDA device arguments")
                args = (args[0], cpu, *args[2:])
            return func(*args, **kwargs)

    return CudaOnCpu()


def install() -> None:
    """Patch torch so that CUDA code runs on the CPU. Idempotent; call before the user's script."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    tc = torch.cuda
    def is_available() -> bool:
        if _from_user():
            _used("torch.cuda.is_available")
        return True

    def device_count() -> int:
        if _from_user():
            _used("torch.cuda.device_count")
        return emulated_device_count()

    tc.is_available = is_available
    tc.device_count = device_count

    def set_device(device) -> None:
        global _current_device
        _used("torch.cuda.set_device")
        _current_device = _ordinal(device)

    tc.set_device = set_device
    tc.current_device = lambda: _current_device
    tc.synchronize = lambda device=None: None
    tc.empty_cache = lambda: None
    tc.ipc_collect = lambda: None
    # CUDA generators do not exist here; "CUDA" tensors draw from the CPU generator.
    for name in ("manual_seed", "manual_seed_all", "seed", "seed_all"):
        setattr(tc, name, lambda *args, **kwargs: None)

    class _NoDevice:
        def __init__(self, device=None) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> bool:
            return False

    tc.device = _NoDevice
    for name, why in (
        ("Event", "CUDA events time GPU work"),
        ("Stream", "CUDA streams order GPU work"),
        ("stream", "CUDA streams order GPU work"),
        ("current_stream", "CUDA streams order GPU work"),
        ("default_stream", "CUDA streams order GPU work"),
        ("get_device_name", "there is no GPU to name"),
        ("get_device_properties", "there is no GPU to describe"),
        ("get_device_capability", "there is no GPU to describe"),
        ("mem_get_info", "there is no GPU memory"),
        ("memory_allocated", "there is no GPU memory"),
        ("max_memory_allocated", "there is no GPU memory"),
        ("memory_reserved", "there is no GPU memory"),
        ("max_memory_reserved", "there is no GPU memory"),
        ("reset_peak_memory_stats", "there is no GPU memory"),
        ("memory_summary", "there is no GPU memory"),
    ):
        setattr(tc, name, _not_emulated(f"torch.cuda.{name}", why))

    _patch_set_default_device(torch)
    _patch_load(torch)
    _patch_amp(torch)
    _patch_distributed(dist)
    _patch_ddp(DistributedDataParallel)
    _make_mode().__enter__()  # stays pushed for the life of the main thread


def _ordinal(device) -> int:
    import torch

    if isinstance(device, torch.device):
        return device.index or 0
    if isinstance(device, str):
        return int(device.split(":", 1)[1]) if ":" in device else 0
    return int(device or 0)


def _patch_set_default_device(torch) -> None:
    original = torch.set_default_device

    @functools.wraps(original)
    def set_default_device(device):
        if device is not None and _is_cuda(device):
            raise CudaNotEmulated(
                f"torch.set_default_device({device!r})", call_site(), "pass device= to the calls instead"
            )
        return original(device)

    torch.set_default_device = set_default_device


def _patch_load(torch) -> None:
    original = torch.load

    @functools.wraps(original)
    def load(f, map_location=None, *args, **kwargs):
        if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
            if _is_cuda(map_location):
                raise CudaNotEmulated(
                    f"torch.load(map_location={map_location!r})", call_site(), 'load with map_location="cpu"'
                )
        return original(f, map_location, *args, **kwargs)

    torch.load = load


def _patch_amp(torch) -> None:
    autocast_init = torch.amp.autocast.__init__

    @functools.wraps(autocast_init)
    def autocast(self, device_type, *args, **kwargs):
        enabled_ = kwargs.get("enabled", args[1] if len(args) > 1 else True)
        if device_type == "cuda" and enabled_:
            raise CudaNotEmulated(
                "torch.autocast('cuda')", call_site(), "on the CPU it would silently compute in float32"
            )
        return autocast_init(self, device_type, *args, **kwargs)

    torch.amp.autocast.__init__ = autocast

    scaler_init = torch.amp.GradScaler.__init__

    @functools.wraps(scaler_init)
    def grad_scaler(self, device="cuda", *args, **kwargs):
        enabled_ = kwargs.get("enabled", args[3] if len(args) > 3 else True)
        if device == "cuda" and enabled_:
            raise CudaNotEmulated("GradScaler('cuda')", call_site(), "loss scaling only means something for fp16 on a GPU")
        return scaler_init(self, device, *args, **kwargs)

    torch.amp.GradScaler.__init__ = grad_scaler


def _gloo(backend):
    if isinstance(backend, str) and "nccl" in backend.lower():
        _used("nccl")
        # "nccl" and "cpu:gloo,cuda:nccl" alike: everything runs on the CPU.
        return "gloo"
    return backend


def _patch_distributed(dist) -> None:
    init = dist.init_process_group

    @functools.wraps(init)
    def init_process_group(backend=None, *args, **kwargs):
        kwargs.pop("device_id", None)
        return init(_gloo(backend), *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.distributed_c10d.init_process_group = init_process_group

    new_group = dist.new_group

    @functools.wraps(new_group)
    def new_group_(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _gloo(kwargs["backend"])
        elif len(args) > 2:
            args = (*args[:2], _gloo(args[2]), *args[3:])
        return new_group(*args, **kwargs)

    dist.new_group = new_group_
    dist.is_nccl_available = lambda: True

    barrier = dist.barrier

    @functools.wraps(barrier)
    def barrier_(*args, **kwargs):
        kwargs.pop("device_ids", None)
        return barrier(*args[:2], **kwargs)

    dist.barrier = barrier_


def _patch_ddp(ddp_class) -> None:
    original = ddp_class.__init__

    @functools.wraps(original)
    def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
        on_cpu = all(p.device.type == "cpu" for p in module.parameters())
        if on_cpu and (device_ids is not None or output_device is not None):
            _used("DDP device_ids")
            device_ids, output_device = None, None
        return original(self, module, device_ids, output_device, *args, **kwargs)

    ddp_class.__init__ = __init__
