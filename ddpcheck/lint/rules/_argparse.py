"""The default of a command-line option, for values read as `args.name`: `parser.add_argument(
"--num-workers", type=int, default=8)` in the same module. Only literal defaults are known."""

from __future__ import annotations

import libcst as cst

from ddpcheck.lint.model.module import ModuleModel
from ddpcheck.lint.model.syntax import int_value, string_text


def option_defaults(module: ModuleModel) -> dict[str, cst.BaseExpression | None]:
    """dest → the default expression (None when the option has none) of every add_argument call."""
    memo: dict[str, cst.BaseExpression | None] | None = module.memo.get("argparse_defaults")
    if memo is not None:
        return memo
    found: dict[str, cst.BaseExpression | None] = {}
    for site in module.calls:
        if site.method != "add_argument":
            continue
        texts = [string_text(a.value) for a in site.node.args if a.keyword is None]
        flags = [f for f in texts if f]
        dest = string_text(site.arg("dest"))
        if dest is None:
            longs = [f for f in flags if f.startswith("--")]
            chosen = longs[0] if longs else (flags[0] if flags else None)
            if chosen is None:
                continue
            dest = chosen.lstrip("-").replace("-", "_")
        found[dest] = site.arg("default")
    module.memo["argparse_defaults"] = found
    return found


def int_default(module: ModuleModel, expr: cst.BaseExpression) -> int | None:
    """The literal integer default of the option `expr` (`args.workers`) reads, if known."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
        return None
    default = option_defaults(module).get(expr.attr.value)
    return int_value(default) if default is not None else None
