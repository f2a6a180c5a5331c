"""Instrument a process when it first imports torch (armed by the start-up hook).

A process that never imports torch pays one meta-path lookup; one that does gets the same
instrumentation as a rank that torchrun started: emulation when asked for, the hang record, the
crash record of spawned workers, and the checks.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_armed = False


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            instrument()

        loader.exec_module = exec_module
        return spec


def arm() -> None:
    global _armed
    if _armed:
        return
    _armed = True
    if "torch" in sys.modules:
        instrument()
    else:
        sys.meta_path.insert(0, _AfterTorch())


_done = False


def instrument() -> None:
    """Everything a rank gets, for a process of a spawn-style job (parent or worker)."""
    global _done
    if _done:
        return
    _done = True
    import torch.distributed as dist

    from ddpcheck.run import emulate, spawn
    from ddpcheck.run.probes import hangs

    if emulate.enabled():
        emulate.install()
    _publish_rank(dist)
    hangs.install(dist)
    spawn.install_worker_wrapper()


def _publish_rank(dist) -> None:
    """Spawned workers get their rank from init_process_group's arguments, not from torchrun's
    environment: put it there, for the checks that read RANK/WORLD_SIZE."""
    init = dist.init_process_group

    def init_process_group(*args, **kwargs):
        rank, world = kwargs.get("rank", -1), kwargs.get("world_size", -1)
        if len(args) > 3:  # (backend, init_method, timeout, world_size, rank, ...)
            world = args[3]
        if len(args) > 4:
            rank = args[4]
        if rank is not None and rank >= 0:
            os.environ["RANK"] = str(rank)
            os.environ.setdefault("LOCAL_RANK", str(rank))
        if world is not None and world > 0:
            os.environ["WORLD_SIZE"] = str(world)
            os.environ.setdefault("LOCAL_WORLD_SIZE", str(world))
        return init(*args, **kwargs)

    init_process_group.__wrapped__ = init
    dist.init_process_group = init_process_group
