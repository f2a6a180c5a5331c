"""The edits behind the rules' fixes, built so that the fixed code is right on every path the
code can take (a sampler that exists only when distributed, a script also run without a
launcher). Each returns a `Replace` (or None when no edit is certain) with its applicability:
safe when behaviour is kept on every path, unsafe when something observable changes — the
rule's page says what.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from ddpcheck.findings import Applicability
from ddpcheck.lint.model.module import ModuleModel
from ddpcheck.lint.model.syntax import children, dotted, int_value, is_none
from ddpcheck.lint.rule import Replace
from ddpcheck.lint.traverse import NO_STATEMENTS_BELOW

if TYPE_CHECKING:
    from ddpcheck.lint.model.module import CallSite, Scope
    from ddpcheck.lint.model.values import Value

SAFE = Applicability.SAFE
UNSAFE = Applicability.UNSAFE


# --- arguments -------------------------------------------------------------------------------
def drop_argument(call: cst.Call, value: cst.BaseExpression, description: str,
                  applicability: Applicability) -> Replace | None:
    """Remove the keyword argument whose value is `value`, keeping the call's layout."""
    args = list(call.args)
    index = next((i for i, a in enumerate(args) if a.value is value), None)
    if index is None or args[index].keyword is None:
        return None  # dropping a positional argument would shift the others
    return Replace(call, call.with_changes(args=_without(args, index)), description, applicability)


def _without(args: list[cst.Arg], index: int) -> list[cst.Arg]:
    args = list(args)
    removed = args.pop(index)
    if index == len(args) and args:
        # It was the last argument: the new last one takes over its (absent or trailing) comma.
        args[-1] = args[-1].with_changes(comma=removed.comma)
    elif index > 0 and isinstance(removed.comma, cst.Comma) and isinstance(previous := args[index - 1].comma, cst.Comma):
        # What followed the removed argument's comma (a comment, a line break) now follows the
        # previous one's.
        args[index - 1] = args[index - 1].with_changes(
            comma=previous.with_changes(whitespace_after=removed.comma.whitespace_after))
    return args


def replace_value(call: cst.Call, value: cst.BaseExpression, new: cst.BaseExpression, description: str,
                  applicability: Applicability) -> Replace:
    args = [a.with_changes(value=new) if a.value is value else a for a in call.args]
    return Replace(call, call.with_changes(args=args), description, applicability)


# --- DataLoader(shuffle=True, sampler=...) ------------------------------------------------------
def shuffle_with_sampler(call: cst.Call, shuffle: cst.BaseExpression, sampler: cst.BaseExpression | None,
                         values: list[Value], distributed_shuffles: bool) -> Replace | None:
    """`shuffle=True` beside a sampler. When the sampler exists on some paths only (`sampler =
    DistributedSampler(ds) if distributed else None`), `shuffle=(sampler is None)` keeps the
    single-process run shuffling and removes the crash (safe). When the sampler is always there,
    drop `shuffle=True`: safe when it is a DistributedSampler that shuffles (the order is still
    shuffled, as asked), unsafe otherwise (the order becomes the sampler's)."""
    conditional = any(is_none(v.node) for v in values if isinstance(v.node, cst.CSTNode))
    if isinstance(sampler, cst.IfExp):
        test = sampler.test
        if dotted(test) is None:
            return None
        if is_none(sampler.orelse):  # DS(ds) if distributed else None → shuffle when not distributed
            new: cst.BaseExpression = cst.UnaryOperation(cst.Not(), test)
        elif is_none(sampler.body):
            new = test
        else:
            return None
        return replace_value(call, shuffle, new, f"Shuffle only when there is no sampler: `shuffle={_code(new)}`", SAFE)
    if conditional:
        if sampler is None or dotted(sampler) is None:
            return None
        new = cst.Comparison(sampler, [cst.ComparisonTarget(cst.Is(), cst.Name("None"))],
                             lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return replace_value(call, shuffle, new, f"Shuffle only when there is no sampler: `shuffle={_code(new)}`", SAFE)
    return drop_argument(call, shuffle, "Remove `shuffle=True` (the sampler decides the order)",
                         SAFE if distributed_shuffles else UNSAFE)


# --- sampler.set_epoch(epoch) ---------------------------------------------------------------------
def set_epoch(loop: cst.CSTNode, expression: str, guard: str | None) -> Replace | None:
    """Insert `<expression>.set_epoch(<loop variable>)` first in the epoch loop. `guard`:
    "none" → only `if <expression> is not None:` (a sampler that is None without DDP);
    "hasattr" → only when the loader's sampler has `set_epoch` (a plain sampler on the
    single-process path has none)."""
    if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name):
        return None
    if not isinstance(loop.body, cst.IndentedBlock):
        return None
    epoch = loop.target.value
    call = f"{expression}.set_epoch({epoch})"
    if guard == "none":
        text = f"if {expression} is not None:\n    {call}\n"
    elif guard == "hasattr":
        text = f'if hasattr({expression}, "set_epoch"):\n    {call}\n'
    else:
        text = f"{call}\n"
    statement = cst.parse_statement(text)
    body = loop.body.with_changes(body=(statement, *loop.body.body))
    return Replace(loop, loop.with_changes(body=body), f"Call `{expression}.set_epoch({epoch})` each epoch", UNSAFE)


def made_on_some_paths(sites: Sequence[CallSite], module: ModuleModel, loop: cst.CSTNode, scope: Scope) -> bool:
    """Whether the calls that make the sampler and its loader (`sites`) may not have run when the
    epoch `loop` (in `scope` of `module`) starts: one sits under a condition the loop is not
    under (`if args.distributed:` around the sampler only), or, in another function, under any
    condition (a builder that returns the distributed loader on one branch)."""
    around = next((f for f in module.fors if f.node is loop), None)
    if around is None:
        return True
    loop_guards = {(id(g.node), g.negated) for g in around.guards}
    for site in sites:
        if site.module is module and site.scope is scope:
            if any((id(g.node), g.negated) not in loop_guards for g in site.guards):
                return True
        elif site.guards:
            return True
    return False


def through_loader(loader: str, scope: Scope, via_batch_sampler: bool) -> str | None:
    """The sampler as reached through the loader the epoch loop iterates (`loader.sampler`), or
    None when the loader is not a name visible in `scope`."""
    if not loader or not scope.lookup(loader.split(".", 1)[0]):
        return None
    return f"{loader}.batch_sampler.sampler" if via_batch_sampler else f"{loader}.sampler"


def names_holding(module: ModuleModel, node: cst.CSTNode) -> list[str]:
    """The names bound to `node` or to an `a if c else b` with `node` as an arm."""
    found = list(module.assigned_names(node))
    if found:
        return found
    for scope in [module.module_scope, *module.function_scopes.values()]:
        for name, values in scope.assignments.items():
            for value in values:
                if isinstance(value, cst.IfExp) and (value.body is node or value.orelse is node):
                    found.append(name)
    return found


# --- torch.distributed names ------------------------------------------------------------------
def distributed_prefix(module: ModuleModel) -> str | None:
    """How the module names torch.distributed: `dist`, `torch.distributed`, or None."""
    aliases = module.names.aliases
    for local, origin in aliases.items():
        if origin == "torch.distributed":
            return local
    if aliases.get("torch") == "torch":
        return "torch.distributed"
    return None


# --- destroy_process_group at the end ---------------------------------------------------------
def destroy_at_end(module: ModuleModel, function: cst.FunctionDef | None, guarded: bool = False) -> Replace | None:
    """Append `<dist>.destroy_process_group()` to `function` (before a final `return`), or to the
    module (inside its `if __name__ == "__main__":` block, when there is one) for module-level
    code. `guarded`: the group is made on some paths only (`if args.distributed:
    init_process_group(...)`, a script that also runs as one process), so the call goes under
    `if <dist>.is_initialized():` — destroying a group that was never made raises. Unsafe: code
    that runs after it in the same process (a caller that goes on using the group, an early
    `return` that skips it) is not seen here."""
    prefix = distributed_prefix(module)
    if prefix is None:
        return None
    if guarded:
        statement = cst.parse_statement(
            f"if {prefix}.is_initialized():\n    {prefix}.destroy_process_group()\n")
    else:
        statement = cst.parse_statement(f"{prefix}.destroy_process_group()\n")
    description = f"Call `{prefix}.destroy_process_group()` when training ends"
    if function is not None:
        if not isinstance(function.body, cst.IndentedBlock):
            return None
        body = list(function.body.body)
        last = body[-1] if body else None
        if isinstance(last, cst.SimpleStatementLine) and last.body and isinstance(last.body[-1], cst.Return):
            body.insert(len(body) - 1, statement)
        else:
            body.append(statement)
        new = function.with_changes(body=function.body.with_changes(body=body))
        return Replace(function, new, description, UNSAFE)
    if module.main_guards:
        guard = module.main_guards[-1]
        if isinstance(guard.body, cst.IndentedBlock):
            new_if = guard.with_changes(body=guard.body.with_changes(body=(*guard.body.body, statement)))
            return Replace(guard, new_if, description, UNSAFE)
        return None
    tree = module.tree
    return Replace(tree, tree.with_changes(body=(*tree.body, statement)), description, UNSAFE)


def runs_whenever(owner: cst.FunctionDef | cst.Module, call: cst.Call) -> bool:
    """Whether `call` runs every time the end of `owner` (a function, or the module with its
    `__main__` block) is reached: it is a statement of the body itself (not under an `if`, a
    loop, a `try` or a `with`), with no `return` before it. Anything else may skip it."""
    body: Sequence[cst.CSTNode]
    if isinstance(owner, cst.Module):
        body = owner.body
    elif isinstance(owner.body, cst.IndentedBlock):
        body = owner.body.body
    else:
        return False
    return _runs_in(body, call, main_guard=isinstance(owner, cst.Module)) is True


def _runs_in(body: Sequence[cst.CSTNode], call: cst.Call, main_guard: bool) -> bool | None:
    """True: `call` is a statement of `body`, reached by every run of it; False: not surely;
    None: not found here."""
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                value = small.value if isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) else None
                if value is call:
                    return True
        if main_guard and isinstance(statement, cst.If) and _is_main_guard(statement) \
                and isinstance(statement.body, cst.IndentedBlock):
            found = _runs_in(statement.body.body, call, main_guard=False)
            if found is not None:
                return found
        if _contains(statement, lambda n: n is call):
            return False  # nested: under a condition, a loop, a try or a with
        if _contains(statement, lambda n: isinstance(n, cst.Return)):
            return False  # a return before it may leave without making the call
    return None


def _is_main_guard(node: cst.If) -> bool:
    test = node.test
    return isinstance(test, cst.Comparison) and dotted(test.left) == "__name__"


def _contains(node: cst.CSTNode, match: Callable[[cst.CSTNode], bool]) -> bool:
    """Whether `node` or a node under it matches, not looking into nested functions, classes or
    lambdas (their statements run some other time)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if match(current):
            return True
        if current is not node and isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        stack.extend(children(current))
    return False


# --- init_process_group under torchrun -------------------------------------------------------
def env_rendezvous(call: cst.Call, init_method: cst.BaseExpression | None, literals: list[str]) -> Replace | None:
    """`init_method="tcp://..."` → `"env://"` and the literal `rank=` / `world_size=` dropped, so
    the launcher's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE apply. Unsafe: the same script run
    by hand without a launcher then needs those variables set."""
    args = list(call.args)
    if init_method is not None:
        quote = init_method.quote if isinstance(init_method, cst.SimpleString) else '"'
        args = [a.with_changes(value=cst.SimpleString(f"{quote}env://{quote}")) if a.value is init_method else a
                for a in args]
    for keyword in literals:
        index = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword), None)
        if index is not None:
            args = _without(args, index)
    if args == list(call.args):
        return None
    return Replace(call, call.with_changes(args=args),
                   "Use `env://` and the launcher's rank and world size", UNSAFE)


# --- --local_rank read from the environment -------------------------------------------------
def local_rank_default_from_env(module: ModuleModel, add_argument: cst.Call) -> Replace | None:
    """`parser.add_argument("--local_rank", type=int, default=D)` → `default=int(os.environ.get(
    "LOCAL_RANK", D))`: torchrun sets LOCAL_RANK and passes no flag; torch.distributed.launch
    (which passes the flag) and runs without a launcher keep what they had. Safe. Only for an
    integer literal default; `import os` is added when the module lacks it."""
    default = next((a for a in add_argument.args if a.keyword is not None and a.keyword.value == "default"), None)
    if default is None or int_value(default.value) is None:
        return None
    os_name = next((local for local, origin in module.names.aliases.items() if origin == "os"), None)
    name = os_name or "os"
    literal = module.code(default.value).strip()
    new_default = cst.parse_expression(f'int({name}.environ.get("LOCAL_RANK", {literal}))')
    new_call = add_argument.with_changes(args=[a.with_changes(value=new_default) if a is default else a
                                               for a in add_argument.args])
    description = 'Default to `int(os.environ.get("LOCAL_RANK", ...))` (what torchrun sets)'
    if os_name is not None:
        return Replace(add_argument, new_call, description, SAFE)
    tree = module.tree
    replaced = _replace_in(tree, add_argument, new_call)
    if replaced is None:
        return None
    return Replace(tree, _with_import(replaced, "import os"), description, SAFE)


def _replace_in(tree: cst.Module, old: cst.CSTNode, new: cst.CSTNode) -> cst.Module | None:
    class Swap(cst.CSTTransformer):
        found = False

        # libcst's signature returns the node type it was given; this one swaps in any node.
        def on_leave(  # type: ignore[override]
                self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            if original is old:
                Swap.found = True
                return new
            return updated

    out = tree.visit(Swap())
    return out if Swap.found and isinstance(out, cst.Module) else None


def _with_import(tree: cst.Module, statement: str) -> cst.Module:
    """Add an import after the module's last top-level import (after the docstring otherwise)."""
    body = list(tree.body)
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and stmt.body and isinstance(stmt.body[0], (cst.Import, cst.ImportFrom)):
            at = i + 1
        elif i == 0 and isinstance(stmt, cst.SimpleStatementLine) and stmt.body and isinstance(stmt.body[0], cst.Expr) \
                and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            at = 1
    body.insert(at, cst.parse_statement(statement + "\n"))
    return tree.with_changes(body=body)


# --- a rank-0 guard around a write -----------------------------------------------------------
def guard_on_rank_zero(module: ModuleModel, call: cst.Call) -> Replace | None:
    """Put the statement `call` is (`torch.save(...)` on a line of its own) under
    `if not dist.is_initialized() or dist.get_rank() == 0:` — true in a single-process run too.
    Unsafe: the other ranks no longer write, so code that reads the file on them right after
    needs a barrier."""
    prefix = distributed_prefix(module)
    if prefix is None:
        return None
    line = _statement_of(module.tree, call)
    if line is None:
        return None
    guard = cst.parse_statement(
        f"if not {prefix}.is_initialized() or {prefix}.get_rank() == 0:\n    pass\n")
    assert isinstance(guard, cst.If)
    new = guard.with_changes(body=guard.body.with_changes(body=(line.with_changes(leading_lines=()),)),
                             leading_lines=line.leading_lines)
    return Replace(line, new, "Write on rank 0 only", UNSAFE)


def _statement_of(tree: cst.Module, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The line that is exactly `call` as an expression statement, inside an indented block or
    at module level."""
    stack: list[cst.CSTNode] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.SimpleStatementLine):
            if len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and node.body[0].value is call:
                return node
            continue
        if type(node) not in NO_STATEMENTS_BELOW:  # (no statement line below an expression or token)
            stack.extend(children(node))
    return None


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)
