"""Lint one file: parse once, walk once with every rule, then position, suppress and fix.

Cost model (see bench/): libcst's parse is the floor. One traversal with a cheap dispatch table
comes next; positions are computed only when a file has a finding, only for the reported nodes
(lint/positions.py: one plain code generation, lines counted between those nodes only).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from typing import Callable, Iterable, Sequence

import libcst as cst

from ddpcheck.findings import Edit, Finding, Fix
from ddpcheck.lint import suppress, traverse
from ddpcheck.lint.context import CallSite, FileContext, ForSite, Guard, Scope
from ddpcheck.lint.facts import ProjectFacts
from ddpcheck.lint.names import dotted
from ddpcheck.lint.positions import node_ranges
from ddpcheck.lint.rule import Replace, Rule
from ddpcheck.lint.tool_codes import SyntaxErrorInFile


class _Walker(cst.CSTVisitor):
    """The one traversal. Tracks scopes, loops, guards and with-blocks, records calls and
    assignments into the FileContext, and calls the rules' hooks through a dispatch table."""

    def __init__(self, ctx: FileContext, rules: Sequence[Rule]) -> None:
        super().__init__()
        self.ctx = ctx
        self.scope = ctx.module_scope
        self.loops: list[cst.CSTNode] = []
        self.guards: list[Guard] = []
        self.withs: list[cst.With] = []
        self._saved: list[tuple[list, list, list]] = []  # loops/guards/withs outside a function
        self._block_marks: list[int] = []  # len(guards) when each indented block was entered
        self.visit_hooks: dict[type, list[Callable]] = defaultdict(list)
        self.leave_hooks: dict[type, list[Callable]] = defaultdict(list)
        self.call_hooks: list[Callable[[CallSite], None]] = []
        for rule in rules:
            for attr in dir(type(rule)):
                if attr.startswith("visit_"):
                    node_type = getattr(cst, attr[6:], None)
                    if node_type is not None:
                        self.visit_hooks[node_type].append(getattr(rule, attr))
                elif attr.startswith("leave_"):
                    node_type = getattr(cst, attr[6:], None)
                    if node_type is not None:
                        self.leave_hooks[node_type].append(getattr(rule, attr))
            if type(rule).on_call is not Rule.on_call:
                self.call_hooks.append(rule.on_call)

    # libcst calls these for every node; a dict lookup is far cheaper than its getattr dispatch.
    def on_visit(self, node: cst.CSTNode) -> bool:
        t = type(node)
        own = _OWN_VISIT.get(t)
        if own is not None:
            own(self, node)
        hooks = self.visit_hooks.get(t)
        if hooks:
            for hook in hooks:
                hook(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        t = type(original_node)
        hooks = self.leave_hooks.get(t)
        if hooks:
            for hook in hooks:
                hook(original_node)
        own = _OWN_LEAVE.get(t)
        if own is not None:
            own(self, original_node)

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        own = _OWN_ATTR_VISIT.get((type(node), attribute))
        if own is not None:
            own(self, node)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        own = _OWN_ATTR_LEAVE.get((type(original_node), attribute))
        if own is not None:
            own(self)

    # --- context tracking --------------------------------------------------------------------
    def _import(self, node) -> None:
        self.ctx.names.add(node)

    def _enter_scope(self, node) -> None:
        self.scope = Scope(node.name.value, node, self.scope)
        if isinstance(node, cst.FunctionDef):
            self.ctx.functions[self.scope.qualname] = node
            # Parameters are bound here, by the caller: they shadow outer names with unknown values.
            params = node.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                self.scope.assignments.setdefault(param.name.value, [])
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    self.scope.assignments.setdefault(star.name.value, [])
        # Code in a function body runs when called, not under the loops/ifs around the def.
        self._saved.append((self.loops, self.guards, self.withs))
        self.loops, self.guards, self.withs = [], [], []

    def _leave_scope(self, node) -> None:
        self.scope = self.scope.parent
        self.loops, self.guards, self.withs = self._saved.pop()

    def _call(self, node: cst.Call) -> None:
        call = CallSite(
            node,
            self.ctx.names.resolve(node.func),
            dotted(node.func),
            self.scope,
            tuple(self.loops),
            tuple(self.guards),
            tuple(self.withs),
        )
        self.ctx.calls.append(call)
        for hook in self.call_hooks:
            hook(call)

    def _enter_block(self, node) -> None:
        self._block_marks.append(len(self.guards))

    def _leave_block(self, node) -> None:
        # Early-exit guards (see _early_exit) last until the end of the block that holds them.
        del self.guards[self._block_marks.pop():]

    def _early_exit(self, node: cst.If) -> None:
        """`if rank != 0: return` (no else): the statements after it in the same block run only
        where the test is false, as if they sat in its else branch."""
        if node.orelse is None and _exits(node.body):
            self.guards.append(Guard(node.test, True, node))

    def _assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def _ann_assign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, None)
            return
        name = dotted(target)
        if name is not None and value is not None:
            scope = self.scope
            scope.assignments.setdefault(name, []).append(value)
            if name.startswith("self.") and scope.parent is not None and isinstance(scope.parent.node, cst.ClassDef):
                # An attribute of `self` is shared by every method: `self.model = DDP(...)` in
                # __init__ is what `self.model(x)` calls in train(). The method keeps its own
                # list too, so lookups inside it still see only its own assignments first.
                scope.parent.assignments.setdefault(name, []).append(value)
            self.ctx.targets.setdefault(id(value), []).append(name)

    def _for_target(self, node: cst.For) -> None:
        name = dotted(node.target)
        if name is not None:
            self.scope.assignments.setdefault(name, [])
        self.ctx.fors.append(ForSite(node, self.scope, tuple(self.loops), tuple(self.guards)))

    def _push_loop(self, node) -> None:
        self.loops.append(node)

    def _pop_loop(self) -> None:
        self.loops.pop()

    def _push_if_body(self, node: cst.If) -> None:
        self.guards.append(Guard(node.test, False, node))

    def _push_if_else(self, node: cst.If) -> None:
        self.guards.append(Guard(node.test, True, node))

    def _pop_guard(self) -> None:
        self.guards.pop()

    def _push_with(self, node: cst.With) -> None:
        self.withs.append(node)

    def _pop_with(self) -> None:
        self.withs.pop()


def _exits(body: cst.BaseSuite) -> bool:
    """Whether a block always leaves its function/loop iteration: ends in return/raise/continue/
    break or a call of sys.exit()/exit()/os._exit()."""
    statements = body.body
    if not statements:
        return False
    last = statements[-1]
    if isinstance(body, cst.SimpleStatementSuite):
        small = last
    elif isinstance(last, cst.SimpleStatementLine) and last.body:
        small = last.body[-1]
    else:
        return False
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        return dotted(small.value.func) in ("sys.exit", "exit", "quit", "os._exit")
    return isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break))


_OWN_VISIT = {
    cst.Import: _Walker._import,
    cst.ImportFrom: _Walker._import,
    cst.FunctionDef: _Walker._enter_scope,
    cst.ClassDef: _Walker._enter_scope,
    cst.Call: _Walker._call,
    cst.Assign: _Walker._assign,
    cst.AnnAssign: _Walker._ann_assign,
    cst.For: _Walker._for_target,
    cst.IndentedBlock: _Walker._enter_block,
    cst.Module: _Walker._enter_block,
}
_OWN_LEAVE = {
    cst.FunctionDef: _Walker._leave_scope,
    cst.ClassDef: _Walker._leave_scope,
    cst.IndentedBlock: _Walker._leave_block,
    cst.Module: _Walker._leave_block,
    cst.If: _Walker._early_exit,
}
_OWN_ATTR_VISIT = {
    (cst.For, "body"): _Walker._push_loop,
    (cst.While, "body"): _Walker._push_loop,
    (cst.If, "body"): _Walker._push_if_body,
    (cst.If, "orelse"): _Walker._push_if_else,
    (cst.With, "body"): _Walker._push_with,
}
_OWN_ATTR_LEAVE = {
    (cst.For, "body"): _Walker._pop_loop,
    (cst.While, "body"): _Walker._pop_loop,
    (cst.If, "body"): _Walker._pop_guard,
    (cst.If, "orelse"): _Walker._pop_guard,
    (cst.With, "body"): _Walker._pop_with,
}


# Facts learnt about helper modules, shared by the files of one process (one lint run) unless the
# caller passes its own; entries are re-read when a helper's size or mtime changes.
_RUN_FACTS = ProjectFacts()


def walk(ctx: FileContext, rules: Sequence[Rule]) -> None:
    """Fill `ctx` (calls, assignments, imports, functions) in one traversal, running `rules`' hooks."""
    traverse.visit(ctx.module, _Walker(ctx, rules))  # libcst's own visit would rebuild every node


def lint_source(
    path: str,
    source: str,
    rules: Iterable[type[Rule]],
    facts: ProjectFacts | None = None,
    *,
    noqa: bool = True,
) -> list[Finding]:
    """Findings of `rules` on one file's text, after `# noqa` suppression (before it when
    `noqa` is False: the caller suppresses and tells which directives were used)."""
    facts = facts if facts is not None else _RUN_FACTS
    module = facts.parsed_tree(path, source)  # already read as another file's helper module
    if module is None:
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError as err:
            return [_syntax_finding(path, source, err)]
        except RecursionError:
            return [_syntax_finding(path, source, None)]
    ctx = FileContext(path, source, module, facts)
    instances = [rule(ctx) for rule in rules]
    walk(ctx, instances)
    facts.remember(ctx)
    for rule in instances:
        rule.finish()
    if not ctx.pending:
        return []
    findings = _materialise(ctx)
    return suppress.apply(source, findings) if noqa else findings


def _materialise(ctx: FileContext) -> list[Finding]:
    # Positions only for the reported nodes (PositionProvider for every node costs more than the parse).
    positions = node_ranges(ctx.module, [pending.node for pending in ctx.pending])
    findings = []
    seen = set()
    for pending in ctx.pending:
        rng = positions.get(pending.node)
        if rng is None:  # a node the rule built itself: report at the file start
            line, col, end_line, end_col = 1, 1, 1, 1
        else:
            line, col, end_line, end_col = rng[0], rng[1] + 1, rng[2], rng[3] + 1
        key = (pending.rule.code, line, col)
        if key in seen:
            continue
        seen.add(key)
        findings.append(
            Finding(
                code=pending.rule.code,
                name=pending.rule.name,
                message=pending.message,
                severity=pending.rule.severity,
                path=ctx.path,
                line=line,
                column=col,
                end_line=end_line,
                end_column=end_col,
                fix=_to_fix(ctx, pending.fix) if pending.fix is not None else None,
            )
        )
    findings.sort(key=Finding.sort_key)
    return findings


def _to_fix(ctx: FileContext, replace: Replace) -> Fix:
    """Turn a node replacement into one text edit: the span where old and new text differ."""
    old = ctx.source
    new = traverse.replace(ctx.module, replace.node, replace.new).code  # deep_replace rebuilds every node
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return Fix(replace.description, (Edit(start, end_old, new[start:end_new]),), replace.applicability)


def _syntax_finding(path: str, source: str, err: Exception | None) -> Finding:
    """Report where the file stops parsing. CPython's own parser (compile only, never run) gives
    the clearest message and position; libcst's is the fallback."""
    line, col, message = 1, 1, "file is nested too deeply to parse"
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as syntax:
        line, col, message = syntax.lineno or 1, syntax.offset or 1, syntax.msg
    except (ValueError, RecursionError, MemoryError):
        pass
    else:
        if isinstance(err, cst.ParserSyntaxError):
            line, col = err.raw_line, err.raw_column + 1
            message = " ".join(err.message.split())
    return Finding(
        code=SyntaxErrorInFile.code,
        name=SyntaxErrorInFile.name,
        message=f"cannot parse: {message}; fix the syntax or exclude the file",
        severity=SyntaxErrorInFile.severity,
        path=path,
        line=line,
        column=col,
    )
