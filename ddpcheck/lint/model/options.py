"""Command-line options a module declares with argparse, for values read as `args.name`:
`parser.add_argument("--arch", default="resnet18")` → "arch" defaults to the string "resnet18".
Only the declaring module's own `add_argument` calls are read; a default is whatever expression
the call passes (None when it passes none)."""

from __future__ import annotations

import libcst as cst

from ddpcheck.lint.model.module import ModuleModel
from ddpcheck.lint.model.syntax import string_text


def option_defaults(module: ModuleModel) -> dict[str, cst.BaseExpression | None]:
    """dest → the default expression (None when the option has none) of every add_argument call."""
    found: dict[str, cst.BaseExpression | None] | None = module.memo.get("argparse_defaults")
    if found is not None:
        return found
    found = {}
    for site in module.calls:
        if site.method != "add_argument":
            continue
        flags = [string_text(a.value) for a in site.node.args if a.keyword is None]
        named = [f for f in flags if f]
        dest = string_text(site.arg("dest"))
        if dest is None:
            longs = [f for f in named if f.startswith("--")]
            chosen = longs[0] if longs else (named[0] if named else None)
            if chosen is None:
                continue
            dest = chosen.lstrip("-").replace("-", "_")
        found[dest] = site.arg("default")
    module.memo["argparse_defaults"] = found
    return found


def option_default(module: ModuleModel, expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The default expression of the option `expr` (`args.arch`) reads, when `module` declares
    an option of that name with a default."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
        return None
    return option_defaults(module).get(expr.attr.value)
