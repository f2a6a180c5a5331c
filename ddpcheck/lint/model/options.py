"""Command-line options a module declares with argparse, for values read as `args.name`:
`parser.add_argument("--arch", default="resnet18")` → "arch" defaults to the string "resnet18".
Only the declaring module's own `add_argument` calls are read; a default is whatever expression
the call passes (None when it passes none)."""

from __future__ import annotations

import re

import libcst as cst

from ddpcheck.lint.model.module import ModuleModel, Scope
from ddpcheck.lint.model.syntax import string_text


def _options(module: ModuleModel) -> dict[str, tuple[cst.BaseExpression | None, str | None]]:
    """dest → (the default expression or None, the action string or None) of every add_argument call."""
    found: dict[str, tuple[cst.BaseExpression | None, str | None]] | None = module.memo.get("argparse_options")
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
        found[dest] = (site.arg("default"), string_text(site.arg("action")))
    module.memo["argparse_options"] = found
    return found


def option_defaults(module: ModuleModel) -> dict[str, cst.BaseExpression | None]:
    """dest → the default expression (None when the option has none) of every add_argument call."""
    return {dest: default for dest, (default, _) in _options(module).items()}


def option_default(module: ModuleModel, expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The default expression of the option `expr` (`args.arch`) reads, when `module` declares
    an option of that name with a default."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
        return None
    found = _options(module).get(expr.attr.value)
    return found[0] if found is not None else None


def constant_flag(module: ModuleModel, expr: cst.BaseExpression) -> bool | None:
    """The value of a flag the command line cannot change: `args.use_ema` (or `not args.use_ema`)
    of `add_argument("--use-ema", action="store_true", default=True)` is always True, a
    store_false option with `default=False` always False — unless the module assigns that
    attribute or rewrites the namespace (`setattr`, `vars(args)`, `__dict__`). None otherwise."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = constant_flag(module, expr.expression)
        return None if inner is None else not inner
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
        return None
    attr = expr.attr.value
    found = _options(module).get(attr)
    if found is None or found[0] is None or found[1] not in ("store_true", "store_false"):
        return None
    default = found[0]
    if not (isinstance(default, cst.Name) and default.value in ("True", "False")):
        return None
    fixed = default.value == "True"
    if fixed != (found[1] == "store_true"):
        return None  # the flag flips the default: not constant
    source = module.source
    if re.search(rf"\.{attr}\s*(=[^=]|[-+*/|&]=)", source) or "setattr(" in source or "vars(" in source \
            or ".__dict__" in source:
        return None
    return fixed


def command_line_switch(module: ModuleModel, expr: cst.BaseExpression) -> bool:
    """Whether `expr` (or `not expr`) reads an on/off option of the command line `module`
    declares (`args.no_progress`, `self.args.disable_progress_bar` of `add_argument(...,
    action="store_true")`) that the module never assigns: every rank of a job gets the same
    command line, so it has the same value on every rank."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return command_line_switch(module, expr.expression)
    if not isinstance(expr, cst.Attribute):
        return False
    attr = expr.attr.value
    found = _options(module).get(attr)
    if found is None or found[1] not in ("store_true", "store_false"):
        return False
    source = module.source
    return not (re.search(rf"\.{attr}\s*(=[^=]|[-+*/|&]=)", source) or "setattr(" in source
                or "vars(" in source or ".__dict__" in source)


def default_rules_out(module: ModuleModel, test: cst.BaseExpression, negated: bool,
                      scope: Scope | None = None) -> bool:
    """Whether the defaults of the command line leave a branch untaken: `if args.model ==
    "PatchTST":` (negated False) when `--model` defaults to another name, or `"ETSformer" in
    args.model` when the default does not contain it — unless the module assigns that attribute.
    With `scope` (where the test is read), a name the option was copied into counts as the
    option: `model_name = args.model_name`, then `if "CNN" in model_name:`."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    comp = test.comparisons[0]
    left, right, operator = test.left, comp.comparator, comp.operator
    if isinstance(operator, cst.Equal) and isinstance(left, cst.SimpleString):
        left, right = right, left
    if isinstance(operator, cst.Equal):
        option, literal = left, right
    elif isinstance(operator, cst.In):
        option, literal = right, left
    else:
        return False
    if isinstance(option, cst.Name) and scope is not None:
        copied = _copied_option(scope, option.value)
        if copied is not None:
            option = copied
    if not isinstance(literal, cst.SimpleString) or not isinstance(option, cst.Attribute):
        return False
    default = option_default(module, option)
    wanted, given = literal.evaluated_value, default.evaluated_value if isinstance(default, cst.SimpleString) else None
    if not isinstance(wanted, str) or not isinstance(given, str):
        return False
    attr = re.escape(option.attr.value)
    if re.search(rf"\.{attr}\s*(=[^=]|[-+*/|&]=)", module.source) or "vars(" in module.source:
        return False
    # `setattr(args, key, ...)` may set it when the module names it in a string (`for key in ["model"]`).
    if "setattr(" in module.source and re.search(rf"[\"']{attr}[\"']", module.source):
        return False
    holds = wanted == given if isinstance(operator, cst.Equal) else wanted in given
    return holds == negated


def _copied_option(scope: Scope, name: str) -> cst.Attribute | None:
    """The option `args.x` that the name is bound to, when that is its one binding where it is
    read (`model_name = args.model_name`, and nothing rebinds `model_name`)."""
    owner = scope.owner_of(name)
    bindings = owner.assignments.get(name, []) if owner is not None else []
    if len(bindings) != 1:
        return None
    bound = bindings[0]
    if isinstance(bound, cst.Attribute) and isinstance(bound.value, cst.Name):
        return bound
    return None


def default_takes(module: ModuleModel, test: cst.BaseExpression, negated: bool) -> bool | None:
    """Whether the command line's defaults take the arm of `test` (`negated`: its else): True
    or False when an option `module` declares decides it — `args.use_deepspeed` with
    `default=False` (or `action="store_true"`) is off, `args.model == "VisNet"` holds when
    `--model` defaults to "VisNet" — None when not known."""
    if default_rules_out(module, test, negated):
        return False
    if default_rules_out(module, test, not negated):
        return True
    inverted = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, inverted = test.expression, not inverted
    if not (isinstance(test, cst.Attribute) and isinstance(test.value, cst.Name)):
        return None
    attr = test.attr.value
    found = _options(module).get(attr)
    if found is None:
        return None
    default, action = found
    if isinstance(default, cst.Name) and default.value in ("True", "False", "None"):
        value = default.value == "True"
    elif default is None and action in ("store_true", "store_false"):
        value = action == "store_false"
    else:
        return None
    if re.search(rf"\.{attr}\s*(=[^=]|[-+*/|&]=)", module.source) or "vars(" in module.source:
        return None
    return (value != inverted) != negated


def option_choices(module: ModuleModel, expr: cst.BaseExpression) -> tuple[str, ...] | None:
    """The strings the option `expr` (`args.launcher`) may hold, when `module` declares it with
    `choices=` of string literals (`choices=["none", "pytorch", "slurm"]`); None otherwise."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
        return None
    wanted = expr.attr.value
    for site in module.calls:
        if site.method != "add_argument":
            continue
        named = [f for f in (string_text(a.value) for a in site.node.args if a.keyword is None) if f]
        dest = string_text(site.arg("dest"))
        if dest is None:
            longs = [f for f in named if f.startswith("--")]
            chosen = longs[0] if longs else (named[0] if named else None)
            dest = chosen.lstrip("-").replace("-", "_") if chosen else None
        if dest != wanted:
            continue
        choices = site.arg("choices")
        if not isinstance(choices, (cst.List, cst.Tuple)):
            return None
        texts = [string_text(e.value) if isinstance(e, cst.Element) else None for e in choices.elements]
        return tuple(t for t in texts if t is not None) if all(t is not None for t in texts) and texts else None
    return None
