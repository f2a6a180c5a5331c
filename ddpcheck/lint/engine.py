"""Lint one file: parse once, build its model in one traversal (running the rules' hooks), let
the rules query the model, then position, suppress and fix.

Cost model (see bench/): libcst's parse is the floor. The traversal uses a cheap dispatch table;
project modules are read only when a question reaches them (lint/model/project.py); positions
are computed only when a file has a finding, only for the reported nodes (lint/positions.py).
"""

from __future__ import annotations

import ast
import gc
import os
from collections import defaultdict
from typing import Iterable, Sequence, cast

import libcst as cst

from ddpcheck.findings import Edit, Finding, Fix, Related
from ddpcheck.lint import suppress, traverse
from ddpcheck.lint.model.build import Hook, build, walk
from ddpcheck.lint.model.module import ModuleModel
from ddpcheck.lint.model.parse import parse_module
from ddpcheck.lint.model.project import Project
from ddpcheck.lint.model.semantic import Model
from ddpcheck.lint.positions import Span, code_at, node_spans
from ddpcheck.lint.rule import Pending, Replace, Rule
from ddpcheck.tool_codes import SyntaxErrorInFile

# The project modules read for one process (one lint run) unless the caller passes its own;
# entries are re-read when a module's size or mtime changes.
_RUN_PROJECT = Project()


def _hooks(rules: Sequence[Rule]) -> tuple[dict[type[cst.CSTNode], list[Hook]], dict[type[cst.CSTNode], list[Hook]]]:
    visit: dict[type[cst.CSTNode], list[Hook]] = defaultdict(list)
    leave: dict[type[cst.CSTNode], list[Hook]] = defaultdict(list)
    for rule in rules:
        for visits, node_type, attr in _hook_names(type(rule)):
            (visit if visits else leave)[node_type].append(getattr(rule, attr))
    return visit, leave


# Per rule class, its hooks (a visit or not, node type, method name) in `dir` order: listing a
# class's attributes for every linted file cost more than some rules' own work.
_HOOK_NAMES: dict[type, tuple[tuple[bool, type[cst.CSTNode], str], ...]] = {}


def _hook_names(kind: type) -> tuple[tuple[bool, type[cst.CSTNode], str], ...]:
    found = _HOOK_NAMES.get(kind)
    if found is None:
        names = []
        for attr in dir(kind):
            if attr.startswith(("visit_", "leave_")):
                node_type = getattr(cst, attr[6:], None)
                if node_type is not None:
                    names.append((attr.startswith("visit_"), node_type, attr))
        found = _HOOK_NAMES[kind] = tuple(names)
    return found


def _build_helper(path: str, source: str, tree: cst.Module, project: Project) -> ModuleModel:
    return build(path, source, tree)


def lint_source(path: str, source: str, rules: Iterable[type[Rule]], project: Project | None = None, *,
                noqa: bool = True, freeze_tree: bool = False) -> list[Finding]:
    """Findings of `rules` on one file's text (and on the project lines it makes wrong), after
    `# noqa` suppression (before it, in every module, when `noqa` is False: the caller
    suppresses and tells which directives were used). `freeze_tree`: the caller keeps the
    collector frozen between files (lint/parallel.py); the file's tree is frozen as soon as it
    is parsed."""
    # The parse and the model allocate hundreds of thousands of objects that live until the file
    # is done, while the models kept for the run make every collection longer: collecting once
    # per file instead of every few hundred allocations saves about a sixth of the lint's CPU.
    collecting = gc.isenabled()
    gc.disable()
    held = project if project is not None else _RUN_PROJECT
    held.hold(True)
    try:
        return _lint_source(path, source, rules, project, noqa, freeze_tree)
    finally:
        held.hold(False)
        if collecting:
            gc.enable()


def _lint_source(path: str, source: str, rules: Iterable[type[Rule]], project: Project | None,
                 noqa: bool, freeze_tree: bool = False) -> list[Finding]:
    project = project if project is not None else _RUN_PROJECT
    project.build = _build_helper
    tree = project.parsed_tree(path, source)  # already read as another file's helper module
    if tree is None:
        try:
            tree = parse_module(source)
        except cst.ParserSyntaxError as err:
            return [_syntax_finding(path, source, err)]
        except (cst.CSTValidationError, RecursionError):  # (libcst's node checks failing on text Python rejects too)
            return [_syntax_finding(path, source, None)]
        if freeze_tree:
            # The parse leaves no cyclic garbage, and the tree lives on in the project's models:
            # the collection after the file (which would walk every node) need not see it.
            gc.freeze()
    module = ModuleModel(path, source, tree)
    model = Model(module, project, defer=True)
    reported: list[Pending] = []
    instances = [rule(model, reported) for rule in rules]
    visit, leave = _hooks(instances)
    walk(module, visit, leave)
    model.start()
    project.remember(module)
    # The reach (which project functions the file runs) is found before any rule asks: a rule
    # that asked first would see answers resting on callers not found yet, and what one rule
    # reports would depend on which others ran before it.
    model.values.fresh_budget()
    model.paths.compute()
    # So are the file-wide answers most rules start from, each with a budget of its own, for the
    # same reason: on a large project the first rule to ask could spend all it had left on them.
    model.settle_file_answers()
    call_hooks = [r.on_call for r in instances if type(r).on_call is not Rule.on_call]
    if call_hooks:
        model.values.fresh_budget()
        for call in module.calls:
            for hook in call_hooks:
                hook(call)
    for rule in instances:
        model.values.fresh_budget()
        rule.finish()
    if not reported:
        return []
    return _materialise(model, reported, path, noqa)


def model_of(path: str, source: str, project: Project | None = None) -> Model:
    """The semantic model of one file's text in its project, without running rules."""
    project = project if project is not None else _RUN_PROJECT
    project.build = _build_helper
    tree = project.parsed_tree(path, source) or parse_module(source)
    model = Model(build(path, source, tree), project)
    project.remember(model.root)
    return model


def _display(root: str, module: ModuleModel) -> str:
    """How a project module is named in a finding: like the linted file is (relative to the
    working directory when that is how the file was given)."""
    if module.path == root:
        return root
    if os.path.isabs(root):
        return module.path
    relative = os.path.relpath(module.path)
    return module.path if relative.startswith("..") else relative


def _line_text(source: str, line: int) -> str:
    lines = source.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _materialise(model: Model, reported: list[Pending], root_path: str, noqa: bool = True) -> list[Finding]:
    # Positions only for the reported nodes (PositionProvider for every node costs more than the parse).
    by_module: dict[int, list[Pending]] = defaultdict(list)
    modules: dict[int, ModuleModel] = {}
    for pending in reported:
        by_module[id(pending.module)].append(pending)
        modules[id(pending.module)] = pending.module
        for module, _, _ in pending.related:
            modules.setdefault(id(module), module)
    wanted: dict[int, list[cst.CSTNode]] = defaultdict(list)
    for pending in reported:
        wanted[id(pending.module)].append(pending.node)
        if pending.fix is not None and pending.module is model.root:
            wanted[id(pending.module)].append(pending.fix.node)
        for module, node, _ in pending.related:
            wanted[id(module)].append(node)
    spans = {key: node_spans(modules[key].tree, nodes, modules[key].source) for key, nodes in wanted.items()}
    findings: list[Finding] = []
    for key, pendings in by_module.items():
        module = modules[key]
        display = _display(root_path, module)
        found = []
        seen = set()
        for pending in pendings:
            span = spans[key].get(id(pending.node))
            if span is None:  # a node the rule built itself: report at the file start
                line, col, end_line, end_col = 1, 1, 1, 1
            else:
                line, col, end_line, end_col = span.line, span.column + 1, span.end_line, span.end_column + 1
                if 0 < pending.line_in <= end_line - line:
                    line += pending.line_in
                    text = _line_text(module.source, line)
                    col, end_line, end_col = len(text) - len(text.lstrip()) + 1, line, len(text.rstrip()) + 1
            dedup = (pending.rule.code, line, col, pending.message)
            if dedup in seen:
                continue
            seen.add(dedup)
            related = []
            for other, node, label in pending.related:
                where = spans[id(other)].get(id(node))
                if where is not None:
                    related.append(Related(_display(root_path, other), where.line, where.column + 1, label))
            fix = None
            if pending.fix is not None and module is model.root:
                fix = _to_fix(module, pending.fix, spans[key].get(id(pending.fix.node)))  # the linted file only
            found.append(Finding(
                code=pending.rule.code,
                name=pending.rule.name,
                message=pending.message,
                severity=pending.rule.severity,
                path=display,
                line=line,
                column=col,
                end_line=end_line,
                end_column=end_col,
                fix=fix,
                related=tuple(related),
            ))
        # With `noqa=False` the caller settles every module's findings against that module's
        # text (and learns which directives were used: DDP901 across files).
        findings += suppress.apply(module.source, found) if noqa else found
    findings.sort(key=Finding.sort_key)
    return findings


def _to_fix(module: ModuleModel, replace: Replace, span: Span | None) -> Fix:
    """Turn a node replacement into one text edit: the new node's code, generated at the old
    one's indentation, over the old one's text."""
    if span is None or not isinstance(replace.new, cst.CSTNode):
        return _to_fix_by_diff(module, replace)  # removals and flattening: the whole new text
    text = code_at(replace.new, span, module.tree)
    old = module.source[span.start:span.end]
    start, end_old, end_new = 0, len(old), len(text)
    while start < min(end_old, end_new) and old[start] == text[start]:
        start += 1
    while end_old > start and end_new > start and old[end_old - 1] == text[end_new - 1]:
        end_old -= 1
        end_new -= 1
    edit = Edit(span.start + start, span.start + end_old, text[start:end_new])
    return Fix(replace.description, (edit,), replace.applicability)


def _to_fix_by_diff(module: ModuleModel, replace: Replace) -> Fix:
    """The edit between the file and the file with the replacement made (a whole code generation)."""
    old = module.source
    # A module with one node replaced is a module (deep_replace would rebuild every node).
    new = cast(cst.Module, traverse.replace(module.tree, replace.node, replace.new)).code
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
