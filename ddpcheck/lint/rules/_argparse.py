"""The default of a command-line option, for values read as `args.name` (model/options.py):
only literal integer defaults are known here."""

from __future__ import annotations

import libcst as cst

from ddpcheck.lint.model.module import ModuleModel
from ddpcheck.lint.model.options import option_default, option_defaults
from ddpcheck.lint.model.syntax import int_value

__all__ = ["int_default", "option_defaults"]


def int_default(module: ModuleModel, expr: cst.BaseExpression) -> int | None:
    """The literal integer default of the option `expr` (`args.workers`) reads, if known."""
    default = option_default(module, expr)
    return int_value(default) if default is not None else None
