"""Run a script written for CUDA GPUs on a CPU-only machine (`ddpcheck run --cpu`).

Installed inside every rank before the user's script starts, only when emulation is on
(`DDPCHECK_EMULATE_CUDA=1`, set by the launcher for `--cpu` or when this machine has no CUDA
device). Each rank behaves as on a node with one GPU per rank — `device_count()` is the number of
ranks on the node (`--nproc`), also in scripts that `mp.spawn` their own workers — and every CUDA
device is the CPU:

- devices: integer and string devices everywhere (`.to(i)`, `.to(f"cuda:{i}")`, `.cuda(i)`,
  `torch.device(i)`, `device=i` in factories, `map_location="cuda:i"`, `set_default_device`) mean
  the CPU; modules and tensors report `cpu`. `pin_memory` is a no-op (DataLoader included) and
  `non_blocking` copies are plain copies. The entry points scripts use (`Tensor.to/.cuda/.new_*`,
  the tensor factories, `Module.to/.cuda`, `torch.device`) are patched to map CUDA to the CPU
  themselves; every other torch call with a `device=` is rewritten by a `TorchFunctionMode`, which
  costs each torch call some Python, so it is pushed only once the script first asks for CUDA
  (a `torch.cuda` query, a CUDA device, `.cuda()`, nccl, ...): a CPU-only script never pays for it.
  Once pushed, it is pushed on every thread that then touches CUDA or starts;
- what the script sees: CUDA is there only for a script that asks for it. The questions a
  script asks before it uses CUDA — `torch.cuda.is_available()`, `device_count()`,
  `is_bf16_supported()`, `torch.accelerator.is_available()` / `device_count()` /
  `current_accelerator()` — get the emulated answer when the script has already used CUDA, when
  the statement that asks demands it (`assert torch.cuda.is_available()`, or an `if` whose branch
  for "no CUDA" raises, exits or returns), or when the script's own source is written for CUDA
  (it names "cuda" or "nccl", calls `.cuda()`, passes `device_ids=`, sets the CUDA device):
  read once, from the script, the files of its folder it imports and the user modules loaded
  so far. A CPU-only script gets torch's
  own answers (`is_available()` False) and runs exactly as without ddpcheck;
- `torch.cuda`: is_available, device_count, current_device, set_device, device(...),
  get_device_name, get_device_properties (a plausible description: name, total_memory,
  major/minor, multi_processor_count), get_device_capability, is_bf16_supported, synchronize,
  empty_cache, memory statistics (zero: nothing is allocated on a GPU), Event (timing works, on
  the host clock), Stream / current_stream / stream() (one in-order stream), manual_seed(_all)
  (CUDA tensors draw from the CPU generator, seeded by torch.manual_seed), get/set_rng_state, nvtx;
- `torch.accelerator`: is_available, device_count, current_accelerator (cuda), set_device_index,
  current_device_index, device_index(...), synchronize;
- AMP: autocast on "cuda" (`torch.autocast`, `torch.amp.autocast`, `torch.cuda.amp.autocast`) is
  CPU autocast with the same dtype (bfloat16 where the CPU lacks float16 autocast, said once); a
  CUDA `GradScaler` is a CPU GradScaler (it scales, unscales, skips steps on inf/nan);
- `torch.distributed`: nccl becomes gloo (`init_process_group`, `new_group`,
  `get_default_backend_for_device`), `device_id=` and `barrier(device_ids=)` are dropped; DDP's
  `device_ids` / `output_device` are dropped for CPU modules. The device the script asked for is
  kept on the DDP object (`_ddpcheck_device`) so that the one-device-per-rank check still judges it.

What truly cannot be emulated fails at the call with `CudaNotEmulated`, one line naming the call and
the user's file:line (reported as DDP121): CUDA graphs, custom CUDA kernels (`torch.cuda.jiterator`,
`load_inline` with CUDA sources), and CUDA-only collectives are not available on the CPU.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable

from ddpcheck.run.run_options import ENV_EMULATE as ENV_FLAG
from ddpcheck.run.run_options import ENV_EMULATED_DEVICES as ENV_DEVICES
from ddpcheck.run.rank.sites import call_site, is_user_file

_installed = False
_active = False  # the script has asked for CUDA: the mode is pushed where it runs
_pushed = threading.local()  # .done: the mode is on this thread's stack
_current_device = 0
USED: set[str] = set()  # what the user's code actually asked of the emulation, for the report
NOTES: list[str] = []  # things said once (an autocast dtype replaced, ...), for the report
on_first_use: Callable[[str], None] | None = None  # set by the rank's session to say it once
_mode: Any = None
_said = False  # the first CUDA use was announced (on_first_use)
_written_for_cuda: bool | None = None  # what the script's source says, once read


def _activate() -> None:
    """The script asked for CUDA: from now on this thread (and every thread that touches CUDA or
    starts) runs torch calls through the device-rewriting mode."""
    global _active
    _active = True
    if _mode is None or getattr(_pushed, "done", False):
        return
    _pushed.done = True
    from torch._C import _len_torch_function_stack, _pop_torch_function_stack, _push_on_torch_function_stack
    from torch.utils._device import DeviceContext

    # Below the modes the script has already pushed (their exits pop them), but above a
    # DeviceContext (`with torch.device(...)`, set_default_device), which must stay at the bottom.
    stack = [_pop_torch_function_stack() for _ in range(_len_torch_function_stack())][::-1]  # bottom first
    while stack and isinstance(stack[0], DeviceContext):
        _push_on_torch_function_stack(stack.pop(0))
    _push_on_torch_function_stack(_mode)
    for mode in stack:
        _push_on_torch_function_stack(mode)


def active() -> bool:
    """The script has used CUDA: the emulation stood in for a GPU (not only for pinned memory)."""
    return _active


def _used(feature: str, cuda: bool = True) -> None:
    """The script asked the emulation for `feature`; `cuda`: a CUDA use (the mode is needed)."""
    global _said
    if cuda and not getattr(_pushed, "done", False):
        _activate()
    USED.add(feature)
    if cuda and not _said:
        _said = True
        if on_first_use is not None:
            try:
                on_first_use(feature)
            except Exception:  # noqa: BLE001 - saying so must never break the run
                pass


# --- does the script ask for CUDA? ---------------------------------------------------------------

_QUERIES = ("is_available", "device_count", "is_bf16_supported", "current_accelerator")
_CUDA_CALLS = frozenset({"set_device", "current_device", "synchronize", "Event", "Stream", "current_stream",
                         "get_device_properties", "get_device_name", "get_device_capability",
                         "set_device_index", "max_memory_allocated", "memory_allocated"})
_STOPS = frozenset({"exit", "quit", "_exit"})
MAX_SCANNED_FILES = 60
MAX_SCANNED_BYTES = 1_000_000


def _asker() -> FrameType | None:
    """The innermost frame of the user's code that asked (past this module and torch)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def cuda_wanted() -> bool:
    """Whether a question about CUDA gets the emulated answer (see the module docstring)."""
    if _active:
        return True
    frame = _asker()
    if frame is not None and _demands(frame.f_code.co_filename, frame.f_lineno):
        return True
    return written_for_cuda()


@functools.lru_cache(maxsize=64)
def _tree(path: str) -> Any:
    import ast

    try:
        if os.path.getsize(path) > MAX_SCANNED_BYTES:
            return None
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _is_query(node: Any) -> bool:
    import ast

    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _QUERIES
               for n in ast.walk(node))


def _negated(test: Any) -> bool:
    """The query in `test` is read as "no CUDA": under `not`, or a count compared as too small."""
    import ast

    for n in ast.walk(test):
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) and _is_query(n.operand):
            return True
        if isinstance(n, ast.Compare) and _is_query(n.left) and any(
                isinstance(op, (ast.Lt, ast.LtE, ast.Eq)) for op in n.ops):
            return True
    return False


def _stops(body: list[Any]) -> bool:
    import ast

    for stmt in body:
        if isinstance(stmt, (ast.Raise, ast.Return)):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _STOPS:
                return True
    return False


def _demands(path: str, line: int) -> bool:
    """The statement at `path:line` requires CUDA: an assert on it, or an `if` on it whose branch
    for "no CUDA" raises, exits or returns."""
    import ast

    tree = _tree(path)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if _is_query(node.test):
                return True
        elif isinstance(node, ast.If) and node.test.lineno <= line <= (node.test.end_lineno or node.test.lineno):
            if _is_query(node.test):
                branch = node.body if _negated(node.test) else node.orelse
                if branch and _stops(branch):
                    return True
    return False


def _cuda_marker(node: Any) -> bool:
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.lower()
        return text in ("cuda", "nccl") or text.startswith("cuda:") or "nccl" in text.split(",")[-1]
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        return isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith("cuda:")
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda":
            return True
        if isinstance(func, ast.Attribute) and func.attr in _CUDA_CALLS and isinstance(func.value, ast.Attribute) \
                and func.value.attr in ("cuda", "accelerator"):
            return True
        return any(k.arg == "device_ids" for k in node.keywords)
    return False


def written_for_cuda() -> bool:
    """The script's own source uses CUDA (beyond asking whether it is there): the file run, the
    user's modules loaded so far, and the files of its folder that it imports. Read once."""
    global _written_for_cuda
    if _written_for_cuda is None:
        _written_for_cuda = any(_file_uses_cuda(path) for path in _user_sources())
    return _written_for_cuda


def _user_sources() -> list[str]:
    paths: list[str] = []
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(main, str):
        paths.append(os.path.abspath(main))
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py") and is_user_file(path):
            paths.append(os.path.abspath(path))
    if paths:
        paths += _imported_here(paths[0])
    seen: list[str] = []
    for path in paths:
        if path not in seen and not os.path.basename(path).startswith("test_"):
            seen.append(path)
    return seen[:MAX_SCANNED_FILES]


def _imported_here(path: str) -> list[str]:
    """The files of the script's own folder that the script imports (not yet loaded, perhaps)."""
    import ast

    tree = _tree(path)
    if tree is None:
        return []
    folder = os.path.dirname(path)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    found = []
    for name in names:
        base = os.path.join(folder, *name.split("."))
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                found.append(candidate)
    return found


def _file_uses_cuda(path: str) -> bool:
    import ast

    tree = _tree(path)
    return tree is not None and any(_cuda_marker(node) for node in ast.walk(tree))


def _note(text: str) -> None:
    if text not in NOTES:
        NOTES.append(text)
        print(f"ddpcheck: {text}", file=sys.stderr, flush=True)


def _caller_file() -> str:
    """The file of the first frame outside this module: who called the emulated function."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def _from_user() -> bool:
    return is_user_file(_caller_file())


@functools.lru_cache(maxsize=1)
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _from_torch() -> bool:
    """Asked by torch itself (DataLoader, torch.compile, GradScaler...): those get the truth, there
    is no GPU, so that they keep to their CPU paths; the script and its libraries see GPUs."""
    return _caller_file().startswith(_torch_dir())


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


def emulated_device_count() -> int:
    for var in (ENV_DEVICES, "LOCAL_WORLD_SIZE"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def _is_cuda(device: Any) -> bool:
    import torch

    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    # A bare int is a CUDA ordinal wherever torch accepts a device (torch.randn(..., device=rank)).
    return isinstance(device, int) and not isinstance(device, bool)


def _ordinal(device: Any) -> int:
    if device is None:
        return _current_device
    if isinstance(device, str):
        return int(device.split(":", 1)[1]) if ":" in device else _current_device
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)  # a torch.device (never imports torch here)
    return _current_device if index is None else int(index)


def _name(device: Any) -> str:
    """The CUDA device the script meant, as torch would print it."""
    return f"cuda:{_ordinal(device)}"


def _own(name: str, value: Any) -> Any:
    """A distinct function object per patched name: torch.compile's tracing rules index torch's
    functions by object, and refuse one object standing for two names."""
    if not callable(value) or isinstance(value, type):
        return value

    @functools.wraps(value)
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return value(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


def _not_emulated(call: str, why: str = "") -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise CudaNotEmulated(call, call_site(), why)

    refuse.__name__ = call.rsplit(".", 1)[-1]
    setattr(refuse, "__ddpcheck_refuses__", call)
    return refuse


# --- devices -------------------------------------------------------------------------------


def _make_mode() -> Any:
    import torch
    from torch.overrides import TorchFunctionMode

    cpu = torch.device("cpu")
    to, cuda, pin = _ORIGINAL["to"], _ORIGINAL["cuda"], _ORIGINAL["pin_memory"]
    is_pinned = torch.Tensor.is_pinned

    class CudaOnCpu(TorchFunctionMode):
        """Rewrites CUDA device arguments to the CPU for every torch call in this thread."""

        def __torch_function__(self, func: Callable[..., Any], types: Collection[type],
                               args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            if func is cuda:
                _used(".cuda()")
                return args[0]
            if func is pin:
                _used("pin_memory", cuda=False)
                return args[0]
            if func is is_pinned:
                return False
            if "device" in kwargs and _is_cuda(kwargs["device"]):
                _used("CUDA device arguments")
                _check_index(kwargs["device"], "device=")
                kwargs = dict(kwargs, device=cpu)
            if kwargs.get("pin_memory"):
                kwargs = dict(kwargs, pin_memory=False)
            if func is to and len(args) > 1 and _is_cuda(args[1]):
                _used("CUDA device arguments")
                _check_index(args[1], "Tensor.to")
                args = (args[0], cpu, *args[2:])
            return func(*args, **kwargs)

    return CudaOnCpu()


def _cover_threads() -> None:
    """The mode is thread-local: push it in every thread the script starts once CUDA is in use."""
    original = threading.Thread.run

    @functools.wraps(original)
    def run(self: threading.Thread) -> None:
        if _active:
            _activate()
        return original(self)

    setattr(threading.Thread, "run", run)


_ORIGINAL: dict[str, Any] = {}  # torch's own Tensor methods, before the patches below
_FACTORIES = (
    "tensor", "as_tensor", "scalar_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint",
    "randperm", "arange", "range", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like",
    "full_like", "rand_like", "randn_like", "randint_like", "empty_strided", "normal", "tril_indices",
    "triu_indices", "sparse_coo_tensor", "complex", "polar",
)  # fmt: skip
_NEW = ("new_tensor", "new_zeros", "new_ones", "new_empty", "new_full")


def _cpu_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`device=<cuda>` → the CPU and `pin_memory=True` → False; said as a CUDA use."""
    device = kwargs.get("device")
    if device is not None and _is_cuda(device):
        _used("CUDA device arguments")
        _check_index(device, "device=")
        kwargs = dict(kwargs, device="cpu")
    if kwargs.get("pin_memory"):
        _used("pin_memory", cuda=False)
        kwargs = dict(kwargs, pin_memory=False)
    return kwargs


def _with_cpu_kwargs(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **_cpu_kwargs(kwargs)) if kwargs else original(*args)

    return factory


def _patch_tensors(torch: Any) -> None:
    """The ways scripts put tensors on a GPU, mapped to the CPU without the mode (which a
    CPU-only script never needs): `Tensor.to/.cuda/.pin_memory/.new_*` and the factories'
    `device=`. Each CUDA use pushes the mode for the rest."""
    tensor = torch.Tensor
    for name in ("to", "cuda", "pin_memory", *_NEW):
        _ORIGINAL[name] = getattr(tensor, name)
    original_to = _ORIGINAL["to"]

    @functools.wraps(original_to)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and _is_cuda(args[0]):
            _used("CUDA device arguments")
            _check_index(args[0], "Tensor.to")
            args = ("cpu", *args[1:])
        if kwargs:
            kwargs = _cpu_kwargs(kwargs)
        return original_to(self, *args, **kwargs)

    def cuda(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        _used(".cuda()")
        _check_index(device, "Tensor.cuda")
        return self

    def pin_memory(self: Any, *args: Any, **kwargs: Any) -> Any:
        _used("pin_memory", cuda=False)
        return self

    setattr(tensor, "to", to)
    setattr(tensor, "cuda", cuda)
    setattr(tensor, "pin_memory", pin_memory)
    for name in _NEW:
        setattr(tensor, name, _with_cpu_kwargs(_ORIGINAL[name]))
    for name in _FACTORIES:
        original = getattr(torch, name, None)
        if original is not None:
            setattr(torch, name, _as_builtin(_with_cpu_kwargs(original), original))


def _as_builtin(stand_in: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """TorchScript compiles a call of `torch.tensor` as the aten op it looks up by the function's
    identity (torch/jit/_builtins.py), in a table torch may have built before these patches; a
    stand-in it does not find there is compiled as Python and fails (`torch.distributed.optim`
    scripts its functional optimizers at import). Register the stand-in as the same op."""
    try:
        from torch.jit import _builtins

        table: Any = _builtins  # private and unannotated
        op = table._find_builtin(original)
        if op is not None:
            table._register_builtin(stand_in, op)
    except (ImportError, AttributeError):  # private API: absent or changed in other releases
        pass
    return stand_in


class _DeviceMeta(type):
    _real: Any = None

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._real)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._real)


class device(metaclass=_DeviceMeta):  # noqa: N801 - stands in for torch.device
    """`torch.device` as on a GPU machine: `torch.device(0)` means the current accelerator's device
    0, so an integer becomes `cuda:i` (there is no accelerator here for torch to ask), which the
    rest of the emulation maps to the CPU. Everything else is torch's own device type. Defined at
    module level so that torch.compile's caches can pickle it."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        real = _DeviceMeta._real
        if len(args) == 1 and not kwargs and isinstance(args[0], int) and not isinstance(args[0], bool):
            _used("torch.device(int)")
            return real("cuda", args[0])
        made = real(*args, **kwargs)
        if made.type == "cuda" and not getattr(_pushed, "done", False) and not _from_torch():
            _activate()  # a CUDA device: the script is about to use it (torch names one for its own books)
        return made


def _patch_device_type(torch: Any) -> None:
    _DeviceMeta._real = torch.device
    device.__doc__ = torch.device.__doc__
    torch.device = device


def _remember(module: Any, name: str) -> None:
    """The GPU a module (and each of its submodules, which DDP may wrap alone) was sent to."""
    for sub in module.modules():
        object.__setattr__(sub, "_ddpcheck_device", name)


def _patch_modules(torch: Any) -> None:
    """`Module.to` parses its device in C++ (no torch function); `Module.cuda` would copy every
    parameter: both keep the module on the CPU and remember which GPU was meant."""
    module = torch.nn.Module
    original_to = module.to

    @functools.wraps(original_to)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        meant = None
        if args and _is_cuda(args[0]):
            meant, args = args[0], ("cpu", *args[1:])
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            meant, kwargs = kwargs["device"], dict(kwargs, device="cpu")
        if meant is not None:
            _used("CUDA device arguments")
            _check_index(meant, "Module.to")
            _remember(self, _name(meant))
        if args and args[0] == "cpu" and len(args) == 1 and not kwargs:
            return self
        return original_to(self, *args, **kwargs)

    def cuda(self: Any, device: Any = None) -> Any:
        _used(".cuda()")
        _check_index(device, "Module.cuda")
        _remember(self, _name(device))
        return self

    module.to = to
    module.cuda = cuda


def _patch_load(torch: Any) -> None:
    original = torch.load

    def to_cpu(location: Any) -> Any:
        if isinstance(location, dict):
            return {k: ("cpu" if _is_cuda(v) else v) for k, v in location.items()}
        if location is None or _is_cuda(location):
            return "cpu"
        if callable(location):
            def relocate(storage: Any, where: str) -> Any:
                try:
                    return location(storage, where)
                except (RuntimeError, AssertionError):
                    return storage
            return relocate
        return location

    @functools.wraps(original)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if map_location is not None and _is_cuda(map_location):
            _used("torch.load(map_location=cuda)")
        return original(f, to_cpu(map_location), *args, **kwargs)

    torch.load = load


def _patch_set_default_device(torch: Any) -> None:
    original = torch.set_default_device

    @functools.wraps(original)
    def set_default_device(device: Any) -> None:
        if device is not None and _is_cuda(device):
            _used("torch.set_default_device(cuda)")
            device = "cpu"
        original(device)

    torch.set_default_device = set_default_device


def _patch_data_loader(torch: Any) -> None:
    """Pinned host memory needs a GPU; a DataLoader asked for it yields ordinary tensors."""
    loader = torch.utils.data.DataLoader
    original = loader.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.pin_memory:
            _used("pin_memory", cuda=False)
            self.pin_memory = False

    loader.__init__ = __init__


# --- torch.cuda ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceProperties:
    """What `torch.cuda.get_device_properties` says of an emulated device."""

    name: str = "ddpcheck emulated GPU (CPU)"
    major: int = 8
    minor: int = 0
    total_memory: int = 16 * 2**30
    multi_processor_count: int = 108
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 2048
    warp_size: int = 32
    L2_cache_size: int = 40 * 2**20
    uuid: str = "00000000-0000-0000-0000-000000000000"
    gcnArchName: str = "NVIDIA"  # noqa: N815 - torch's spelling


class Event:
    """A CUDA event on the host clock: `record`, `synchronize`, `elapsed_time` (milliseconds)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._at: float | None = None

    def record(self, stream: Any = None) -> None:
        self._at = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._at is None or end_event._at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._at - self._at) * 1000.0


class Stream:
    """One in-order stream: everything the CPU does is already ordered."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device_index = _ordinal(device)
        self.priority = priority

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        recorded = event or Event()
        recorded.record()
        return recorded

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def is_capturing(self) -> bool:
        return False

    @property
    def cuda_stream(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return 0


_STREAM = Stream()


class _StreamContext:
    def __init__(self, stream: Any = None) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        return None


class _DeviceContext:
    """`with torch.cuda.device(i):` switches the current device for the block."""

    def __init__(self, device: Any = None) -> None:
        self.index = None if device is None or (isinstance(device, int) and device < 0) else _ordinal(device)
        self.previous = 0

    def __enter__(self) -> "_DeviceContext":
        global _current_device
        self.previous = _current_device
        if self.index is not None:
            _current_device = _check_index(self.index, "torch.cuda.device")
        return self

    def __exit__(self, *exc: object) -> None:
        global _current_device
        _current_device = self.previous


class InvalidDeviceOrdinal(RuntimeError):
    """A CUDA device index at or past the node's GPU count: what CUDA raises on a real node."""

    stands_for_torch = True  # its traceback is shown as the script's own (rank/bootstrap.py)

    def __init__(self, call: str, index: int, count: int) -> None:
        self.call, self.index, self.count = call, index, count
        node = os.environ.get("GROUP_RANK", "0")
        super().__init__(f"CUDA error: invalid device ordinal: {call} asked for cuda:{index}, and node {node} "
                         f"has {count} GPU(s), cuda:0 to cuda:{count - 1}")


def _check_index(device: Any, call: str) -> int:
    """The device's index, refused as a real node refuses it when the node has no such GPU."""
    index = _ordinal(device)
    count = emulated_device_count()
    if not 0 <= index < count:
        raise InvalidDeviceOrdinal(call, index, count)
    return index


def _check_cuda(device: Any, call: str) -> None:
    """`device` may be any device argument: a CUDA one with an index must exist on this node."""
    if device is not None and _is_cuda(device):
        _check_index(device, call)


def _patch_cuda(torch: Any) -> None:
    tc = torch.cuda
    real_is_available, real_device_count = tc.is_available, tc.device_count

    real_bf16 = tc.is_bf16_supported

    def is_available() -> bool:
        if _from_torch() or not cuda_wanted():
            return bool(real_is_available())
        if _from_user():
            _used("torch.cuda.is_available")
        return True

    def device_count() -> int:
        if _from_torch() or not cuda_wanted():
            return int(real_device_count())
        if _from_user():
            _used("torch.cuda.device_count")
        return emulated_device_count()

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        if _from_torch() or not cuda_wanted():
            try:
                return bool(real_bf16(including_emulation))
            except (RuntimeError, AssertionError, TypeError):
                return False
        return True

    def current_device() -> int:
        # torch.compile asks too, compiling a CPU script: that is no CUDA use of the script's own
        # (pushing the mode mid-compile also breaks dynamo's guard on the mode stack).
        if not (_from_torch() and not _active):
            _activate()
        return _current_device

    def set_device(device: Any) -> None:
        global _current_device
        _used("torch.cuda.set_device")
        _current_device = _check_index(device, "torch.cuda.set_device")

    def get_device_properties(device: Any = None) -> DeviceProperties:
        _check_index(device, "torch.cuda.get_device_properties")
        if not (_from_torch() and not _active):
            _used("torch.cuda device queries")
        return DeviceProperties()

    def get_device_name(device: Any = None) -> str:
        return get_device_properties(device).name

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        props = get_device_properties(device)
        return props.major, props.minor

    def zero(*args: Any, **kwargs: Any) -> int:
        _used("torch.cuda memory statistics")
        return 0

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        total = get_device_properties(device).total_memory
        return total, total

    def memory_stats(device: Any = None) -> dict[str, int]:
        _used("torch.cuda memory statistics")
        return {}

    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        return "ddpcheck: CUDA is emulated on the CPU; no GPU memory is allocated.\n"

    for name, value in {
        "is_available": is_available, "device_count": device_count, "set_device": set_device,
        "current_device": current_device, "get_device_properties": get_device_properties,
        "get_device_name": get_device_name, "get_device_capability": get_device_capability,
        "is_bf16_supported": is_bf16_supported, "is_initialized": lambda: True,
        "init": nothing, "synchronize": nothing, "empty_cache": nothing, "ipc_collect": nothing,
        "memory_allocated": zero, "max_memory_allocated": zero, "memory_reserved": zero,
        "max_memory_reserved": zero, "memory_cached": zero, "max_memory_cached": zero,
        "reset_peak_memory_stats": nothing, "reset_max_memory_allocated": nothing,
        "reset_max_memory_cached": nothing, "reset_accumulated_memory_stats": nothing,
        "mem_get_info": mem_get_info, "memory_stats": memory_stats, "memory_summary": memory_summary,
        "set_per_process_memory_fraction": nothing,
        "Event": Event, "Stream": Stream, "ExternalStream": Stream,
        "current_stream": lambda device=None: _STREAM, "default_stream": lambda device=None: _STREAM,
        "stream": _StreamContext, "StreamContext": _StreamContext, "set_stream": nothing,
        "is_current_stream_capturing": lambda: False,
        "device": _DeviceContext, "device_of": lambda obj: _DeviceContext(None),
        "manual_seed": nothing, "manual_seed_all": nothing, "seed": nothing, "seed_all": nothing,
        "initial_seed": lambda: torch.initial_seed(),
        "get_rng_state": lambda device="cuda": torch.get_rng_state(),
        "get_rng_state_all": lambda: [torch.get_rng_state() for _ in range(emulated_device_count())],
        "set_rng_state": nothing, "set_rng_state_all": nothing,
        "CUDAGraph": _not_emulated("torch.cuda.CUDAGraph", "CUDA graphs replay GPU kernels"),
        "graph": _not_emulated("torch.cuda.graph", "CUDA graphs replay GPU kernels"),
        "make_graphed_callables": _not_emulated("torch.cuda.make_graphed_callables", "CUDA graphs replay GPU kernels"),
    }.items():
        setattr(tc, name, _own(name, value))
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        setattr(tc.nvtx, name, _own(name, nothing))
    tc.nvtx.range = _own("range", lambda *args, **kwargs: _StreamContext())
    if hasattr(tc, "jiterator"):
        tc.jiterator._create_jit_fn = _not_emulated("torch.cuda.jiterator", "it compiles a CUDA kernel")


def _patch_accelerator(torch: Any) -> None:
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    cuda = torch.cuda
    real_is_available, real_current = acc.is_available, acc.current_accelerator
    real_device_count = acc.device_count

    def current_accelerator(check_available: bool = False) -> Any:
        if _from_torch() or not cuda_wanted():
            return real_current(check_available)
        if _from_user():
            _used("torch.accelerator")
        return torch.device("cuda")

    def set_device_index(device: Any, /) -> None:
        cuda.set_device(device)

    def device_count() -> int:
        return int(real_device_count()) if _from_torch() or not cuda_wanted() else emulated_device_count()

    class device_index(_DeviceContext):  # noqa: N801 - torch's name
        def __init__(self, device: Any, /) -> None:
            super().__init__(device)

    def is_available() -> bool:
        if _from_torch() or not cuda_wanted():
            return bool(real_is_available())
        if _from_user():
            _used("torch.accelerator")
        return True

    for name, value in {
        "is_available": is_available,
        "device_count": device_count,
        "current_accelerator": current_accelerator,
        "set_device_index": set_device_index, "set_device_idx": set_device_index,
        "current_device_index": cuda.current_device, "current_device_idx": cuda.current_device,
        "device_index": device_index,
        "synchronize": lambda device=None, /: None,
        "empty_cache": lambda: None,
        "current_stream": lambda device=None, /: _STREAM,
        "set_stream": lambda stream: None,
        "memory_allocated": lambda device=None, /: 0, "max_memory_allocated": lambda device=None, /: 0,
        "memory_reserved": lambda device=None, /: 0, "max_memory_reserved": lambda device=None, /: 0,
        "reset_peak_memory_stats": lambda device=None, /: None,
    }.items():
        if hasattr(acc, name):
            setattr(acc, name, _own(name, value))


# --- AMP -----------------------------------------------------------------------------------


def _cpu_autocast_dtype(torch: Any, dtype: Any) -> Any:
    """The dtype a CUDA autocast would use (float16 unless given), if the CPU's autocast has it."""
    if dtype is None:
        try:
            dtype = torch.get_autocast_dtype("cuda")
        except (RuntimeError, AttributeError):
            dtype = torch.float16
    if dtype == torch.bfloat16:
        return dtype
    try:
        with torch.autocast("cpu", dtype=dtype, enabled=True):
            pass
        return dtype
    except (RuntimeError, AssertionError):
        _note(f"autocast to {dtype} on the emulated GPU runs as bfloat16 (the CPU has no {dtype} autocast)")
        return torch.bfloat16


def _patch_amp(torch: Any) -> None:
    autocast = torch.amp.autocast_mode.autocast
    autocast_init = autocast.__init__

    @functools.wraps(autocast_init)
    def __init__(self: Any, device_type: Any, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if device_type == "cuda":
            _used("autocast")
            dtype = _cpu_autocast_dtype(torch, dtype)
            device_type = "cpu"
        autocast_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    autocast.__init__ = __init__

    scaler = torch.amp.GradScaler
    scaler_init = scaler.__init__

    @functools.wraps(scaler_init)
    def grad_scaler(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        if device == "cuda":
            _used("GradScaler")
            device = "cpu"
        scaler_init(self, device, *args, **kwargs)

    scaler.__init__ = grad_scaler


# --- torch.distributed ---------------------------------------------------------------------


def _gloo(backend: Any) -> Any:
    if isinstance(backend, str) and "nccl" in backend.lower():
        _used("nccl")
        # "nccl" and "cpu:gloo,cuda:nccl" alike: everything runs on the CPU.
        return "gloo"
    return backend


def _patch_distributed(dist: Any) -> None:
    init = dist.init_process_group

    @functools.wraps(init)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if len(args) > 7:  # positional device_id (the ninth parameter)
            args = args[:7]
        kwargs.pop("device_id", None)
        return init(_gloo(backend), *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.distributed_c10d.init_process_group = init_process_group

    new_group = dist.new_group

    @functools.wraps(new_group)
    def new_group_(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("device_id", None)
        if "backend" in kwargs:
            kwargs["backend"] = _gloo(kwargs["backend"])
        elif len(args) > 2:
            args = (*args[:2], _gloo(args[2]), *args[3:])
        return new_group(*args, **kwargs)

    dist.new_group = new_group_
    dist.is_nccl_available = lambda: True

    default_backend = getattr(dist, "get_default_backend_for_device", None)
    if default_backend is not None:
        @functools.wraps(default_backend)
        def get_default_backend_for_device(device: Any) -> str:
            return str(default_backend(device))  # "nccl" for cuda, as on a GPU node; init maps it

        dist.get_default_backend_for_device = get_default_backend_for_device

    barrier = dist.barrier

    @functools.wraps(barrier)
    def barrier_(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("device_ids", None)
        return barrier(*args[:2], **kwargs)

    dist.barrier = barrier_


def _patch_ddp(ddp_class: Any) -> None:
    original = ddp_class.__init__

    @functools.wraps(original)
    def __init__(self: Any, module: Any, device_ids: Any = None, output_device: Any = None,
                 *args: Any, **kwargs: Any) -> None:
        meant = getattr(module, "_ddpcheck_device", None)
        on_cpu = all(p.device.type == "cpu" for p in module.parameters())
        if on_cpu and (device_ids is not None or output_device is not None):
            _used("DDP device_ids")
            for device in [*(device_ids or ()), output_device]:
                _check_cuda(device, "DistributedDataParallel(device_ids=...)")
            if device_ids:
                meant = _name(device_ids[0])
            device_ids, output_device = None, None
        original(self, module, device_ids, output_device, *args, **kwargs)
        object.__setattr__(self, "_ddpcheck_device", meant)

    ddp_class.__init__ = __init__


def meant_device(ddp: Any) -> str | None:
    """The CUDA device a DDP model would be on with real GPUs (None: a CPU model)."""
    return getattr(ddp, "_ddpcheck_device", None)


# --- install -------------------------------------------------------------------------------


def install() -> None:
    """Patch torch so that CUDA code runs on the CPU. Idempotent; call before the user's script."""
    global _installed, _mode
    if _installed:
        return
    _installed = True
    import torch
    import torch.distributed as dist
    import torch.utils.data
    from torch.nn.parallel import DistributedDataParallel

    _patch_cuda(torch)
    _patch_accelerator(torch)
    _patch_device_type(torch)
    _patch_modules(torch)
    _patch_tensors(torch)
    _patch_set_default_device(torch)
    _patch_load(torch)
    _patch_data_loader(torch)
    _patch_amp(torch)
    _patch_distributed(dist)
    _patch_ddp(DistributedDataParallel)
    _mode = _make_mode()  # pushed at the first CUDA use (_activate), never before
    _cover_threads()
