"""Run code right after the user's program has imported torch, and not before: a process that never
imports torch pays one meta-path lookup. Imports nothing of ddpcheck (the start-up hook uses it
in every process of a spawn-style run)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Callable, Sequence


def when_torch_imported(callback: Callable[[], None]) -> None:
    """Run `callback` right after the `torch` package has finished importing (now, if it has)."""
    if "torch" in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _TorchImportHook(callback))


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Runs `callback` right after the `torch` package has finished importing, then retires."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, callback = spec.loader, self.callback
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            callback()

        setattr(loader, "exec_module", exec_module)
        return spec
