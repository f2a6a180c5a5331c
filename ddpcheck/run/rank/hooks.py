"""The hook layer: wraps torch's events once per rank and drives the session's hook lists
(rank/session.py). Installed after torch is imported, before any probe's capture.

- the global optimizer step pre/post hooks (`torch.optim.optimizer.register_optimizer_step_*`):
  they fire for every optimizer, see the final gradients, and need no DDP comm hook;
- `init_process_group` / `destroy_process_group`, wrapped in `torch.distributed` and
  `distributed_c10d`; ddpcheck's own gloo group is created right after the user's one;
- `DistributedDataParallel.__init__` and `forward`, patched on the class (names the user bound
  before or after the import all see it);
- DDP's `Join()` context, inside which the live exchange pauses;
- the phases of a step for `session.on_phase`: the DataLoader iterator's `__next__`, DDP's forward,
  `torch.autograd.backward` (the optimizer step's phase comes from the step hooks above).
"""

from __future__ import annotations

import functools
import os
import weakref
from datetime import timedelta
from typing import Any

from ddpcheck.run.rank.session import Session, guard


def capturing_cuda_graph() -> bool:
    """Whether a CUDA graph is being captured on the current stream. Kernels launched then are
    recorded, not run: ddpcheck's own tensor work and timing events would be recorded into the
    user's graph, and a synchronising call would invalidate the capture, so the hooks stand aside
    (the graph's replays are not steps ddpcheck can see anyway)."""
    import torch

    cuda: Any = torch.cuda
    try:  # a capture needs CUDA started; the flag is a cheap read on every forward
        return bool(cuda.is_initialized() and cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - no CUDA, or an emulated one: nothing is being captured
        return False


def install(session: Session) -> None:
    """Wrap init/destroy_process_group and register the global optimizer step hooks."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    def before_step(opt: Any, args: Any, kwargs: Any) -> None:
        if not capturing_cuda_graph():
            session.before_optimizer_step(opt)

    def after_step(opt: Any, args: Any, kwargs: Any) -> None:
        if not capturing_cuda_graph():
            session.after_optimizer_step(opt)

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)

    original_init = c10d.init_process_group
    original_destroy = c10d.destroy_process_group

    @functools.wraps(original_init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        names = ["backend", "init_method", "timeout", "world_size", "rank", "store", "group_name",
                 "pg_options", "device_id"]
        kwargs.update(dict(zip(names, args)))
        for fn in session.before_init:
            fn(kwargs)  # may rewrite kwargs; errors here are ours to see, not swallowed silently
        result = original_init(**kwargs)
        if session.group is None:
            try:
                # Same place in every rank's program order, so every rank creates it together.
                timeout = timedelta(seconds=float(os.environ.get("DDPCHECK_EXCHANGE_TIMEOUT", "120")))
                session.group = dist.new_group(backend="gloo", timeout=timeout)
                # The checked steps' exchange has a group of its own: a rank that stepped an
                # optimizer of its own has an exchange in flight that no other rank matches, and
                # on a shared group ddpcheck's next comparison would pair with it.
                session.steps_group = dist.new_group(backend="gloo", timeout=timeout)
            except Exception as exc:  # noqa: BLE001
                session.meta["group_error"] = f"{type(exc).__name__}: {exc}"[:500]
        for after in session.after_init:
            guard(after)
        return result

    @functools.wraps(original_destroy)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None or group is c10d.GroupMember.WORLD:
            session.end("destroy_process_group")
            session.group = session.steps_group = None  # destroyed with the default group
        return original_destroy(group)

    for module in (c10d, dist):
        setattr(module, "init_process_group", init_process_group)
        setattr(module, "destroy_process_group", destroy_process_group)

    _wrap_ddp(session)
    _watch_join(session)
    _watch_phases(session)


def _watch_join(session: Session) -> None:
    from torch.distributed.algorithms.join import Join

    original_enter: Any = Join.__enter__
    original_exit: Any = Join.__exit__

    @functools.wraps(original_enter)
    def __enter__(self: Any) -> Any:
        session.uneven = True
        for fn in session.on_join_enter:
            guard(fn)
        return original_enter(self)

    @functools.wraps(original_exit)
    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            result = original_exit(self, *exc)
            if not exc or exc[0] is None:  # every rank has left the context: a common point
                guard(session.align_steps)
            return result
        finally:
            session.uneven = False
            session.meta["used_join"] = True
            for fn in session.on_join_exit:
                guard(fn)

    setattr(Join, "__enter__", __enter__)
    setattr(Join, "__exit__", __exit__)


def _wrap_ddp(session: Session) -> None:
    """Know every DDP object and each forward through it (patched on the class, so names the
    user bound before or after import all see it)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    original_init: Any = DDP.__init__
    original_forward: Any = DDP.forward

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if session.before_ddp_init:
            module = args[0] if args else kwargs.get("module")
            group = kwargs.get("process_group", args[6] if len(args) > 6 else None)
            if kwargs.get("device_mesh") is not None:
                group = kwargs["device_mesh"]
            for before in session.before_ddp_init:
                guard(before, module, group)
        original_init(self, *args, **kwargs)
        session.ddp_modules.append(weakref.ref(self))
        ignored = getattr(self, "parameters_to_ignore", ())  # DDP leaves these alone: rank-local
        for name, param in self.module.named_parameters():
            if name not in ignored:
                session.param_names.setdefault(id(param), name)
        for fn in session.on_ddp_init:
            guard(fn, self)

    @functools.wraps(original_forward)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if capturing_cuda_graph():
            return original_forward(self, *args, **kwargs)
        session.forwards += 1
        if not getattr(self, "require_backward_grad_sync", True):
            session.unsynced += 1
        for fn in session.on_ddp_forward:
            guard(fn, self, args, kwargs)
        if not session.forwarded:
            session.first_forward()
        if not session.on_phase:
            return original_forward(self, *args, **kwargs)
        session.phase("forward", True)
        try:
            return original_forward(self, *args, **kwargs)
        finally:
            session.phase("forward", False)

    setattr(DDP, "__init__", __init__)
    setattr(DDP, "forward", forward)


def _watch_phases(session: Session) -> None:
    import torch.autograd
    import torch.utils.data.dataloader as dl

    original_backward: Any = torch.autograd.backward
    original_next: Any = dl._BaseDataLoaderIter.__next__

    @functools.wraps(original_backward)
    def backward(*args: Any, **kwargs: Any) -> Any:
        if not session.on_phase or capturing_cuda_graph():
            return original_backward(*args, **kwargs)
        session.phase("backward", True)
        try:
            return original_backward(*args, **kwargs)
        finally:
            session.phase("backward", False)

    @functools.wraps(original_next)
    def __next__(self: Any) -> Any:
        if not session.on_phase:
            return original_next(self)
        session.phase("data", True)
        try:
            return original_next(self)
        finally:
            session.phase("data", False)

    setattr(torch.autograd, "backward", backward)
    setattr(dl._BaseDataLoaderIter, "__next__", __next__)
