"""Exact line/column ranges for the few nodes that get a finding, without libcst's PositionProvider.

PositionProvider re-generates the file and updates a line/column pair for every token (a regex
split per token and a CodePosition per node): on the bench corpus that costs more than the parse
itself. Here the same code generation runs with libcst's plain CodegenState, which only appends
tokens; each node's range is kept as token indices (the same rules PositionProvider applies:
syntactic ranges first, hoisted from start/end children, else the whitespace-inclusive range),
and only the requested nodes' indices are turned into lines and columns, by counting newlines in
the joined text between them. The results equal PositionProvider's (tests/test_positions.py).

Most files get a finding near their end, so even that generation covers almost the whole file.
Given the file's text, only the statement that holds a reported node is generated: libcst's
code is the text it parsed, character for character, and a statement's code does not depend on
what comes before it except for its indentation; so where that code occurs exactly once in the
text, there it is, and its line is the number of newlines before it. The innermost statement
whose code is unique is used (a short line like `loss.backward()` often is not; its loop or
function then is); a file where this cannot hold (carriage returns, no final newline) or a node
no statement holds falls back to the whole generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState

from ddpcheck.lint.traverse import TOKEN_FIELDS, TOKEN_NODES, attributes_of

# PositionProvider's own newline rule: "\r\n", "\r" or "\n" each end a line.
_NEWLINE = re.compile(r"\r\n?|\n")


class _AllFound(Exception):
    pass


class _Syntactic:
    """`with state.record_syntactic_position(node, ...)`: a plain object (a generator-based
    context manager per node costs more than the node's own code generation)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: _IndexState, node: cst.CSTNode, start_node: cst.CSTNode | None,
                 end_node: cst.CSTNode | None) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node
        self.start = 0

    def __enter__(self) -> None:
        self.start = len(self.state.tokens)

    def __exit__(self, kind: object, value: object, trace: object) -> Literal[False]:
        if kind is not None:
            return False  # when _AllFound stops the generation, nothing more is recorded
        ranges = self.state.ranges
        start = ranges[id(self.start_node)][0] if self.start_node is not None else self.start
        end = ranges[id(self.end_node)][1] if self.end_node is not None else len(self.state.tokens)
        ranges[id(self.node)] = (start, end)
        return False


class _IndexState(CodegenState):
    """Code generation that records, per node, the token index where it starts and ends."""

    def __init__(self, module: cst.Module, wanted: set[cst.CSTNode]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.ranges: dict[int, tuple[int, int]] = {}  # id(node) → syntactic (else whole) token range
        self.whole: dict[int, tuple[int, int]] = {}  # id(node) → whole token range, wanted nodes
        self.indents: dict[int, tuple[str, ...]] = {}  # id(node) → indentation it is generated at
        self._stack: list[int] = []
        self._wanted = {id(n) for n in wanted}
        self._left = set(self._wanted)  # requested nodes whose range is not complete yet

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(len(self.tokens))
        if id(node) in self._wanted:
            self.indents[id(node)] = tuple(self.indent_tokens)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        key = id(node)
        if key not in self.ranges:  # a syntactic range recorded inside wins, as in PositionProvider
            self.ranges[key] = (start, len(self.tokens))
        if key in self._left:
            self.whole[key] = (start, len(self.tokens))
            self._left.discard(key)
            if not self._left:
                raise _AllFound  # the rest of the file cannot change these ranges

    # libcst declares a generator-based context manager here; its callers only use `with`, and
    # this plain one records the range without a generator per node.
    def record_syntactic_position(  # type: ignore[override]
            self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
            end_node: cst.CSTNode | None = None) -> _Syntactic:
        return _Syntactic(self, node, start_node, end_node)

    def pop_trailing_newline(self) -> None:
        # PositionProvider computed its positions before this pop; keep the token so ours match.
        pass


@dataclass(frozen=True)
class Span:
    """Where a node is: its reported range (line 1-based, column 0-based, like libcst's
    CodeRange) and, for editing it, the character offsets of its whole text and the indentation
    it is generated at."""

    line: int
    column: int
    end_line: int
    end_column: int
    start: int
    end: int
    indent: tuple[str, ...]


def node_spans(module: cst.Module, nodes: Iterable[cst.CSTNode], source: str | None = None) -> dict[int, Span]:
    """`id(node) → Span` for each of `nodes` found in `module`. With `source`, the text `module`
    was parsed from, only the statements that hold them are generated; without it, the module
    up to the last of them."""
    nodes = list(nodes)
    if not nodes:
        return {}
    if source is None or "\r" in source or not module.has_trailing_newline:
        # A "\r" makes PositionProvider's line count depend on token boundaries, and a file
        # without a final newline does not end with its last statement's code.
        return _whole_spans(module, nodes)
    try:
        anchors = _anchors(module, nodes)
    except RecursionError:
        return _whole_spans(module, nodes)
    out: dict[int, Span] = {}
    # Each node tries its innermost statement first, then the ones around it.
    level = {id(n): len(anchors[id(n)]) - 1 for n in nodes if anchors.get(id(n))}
    todo = {id(n): n for n in nodes if id(n) in level}
    # The module itself and its header and footer lines; nodes not in the tree are left out.
    rest = [n for n in nodes if id(n) in anchors and id(n) not in level]
    while todo:
        groups: dict[int, tuple[cst.CSTNode, tuple[str, ...], list[cst.CSTNode]]] = {}
        for key, node in todo.items():
            statement, indent = anchors[key][level[key]]
            groups.setdefault(id(statement), (statement, indent, []))[2].append(node)
        for statement, indent, members in groups.values():
            spans = _statement_spans(module, source, statement, indent, members)
            for node in members:
                key = id(node)
                if spans is not None and key in spans:
                    out[key] = spans[key]
                    del todo[key]
                elif level[key] > 0:
                    level[key] -= 1
                else:
                    rest.append(node)
                    del todo[key]
    if rest:
        out.update(_whole_spans(module, rest))
    return out


def _whole_spans(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> dict[int, Span]:
    """node_spans by generating the module from its start (stopped after the last of `nodes`)."""
    state = _IndexState(module, set(nodes))
    try:
        module._codegen(state)
    except _AllFound:
        pass
    return _spans_of(state, nodes, 1, 0)


def _statement_spans(module: cst.Module, source: str, statement: cst.CSTNode, indent: tuple[str, ...],
                     nodes: Sequence[cst.CSTNode]) -> dict[int, Span] | None:
    """The spans of `nodes` (all inside `statement`, generated at `indent`), when the code of
    `statement` up to the last of them occurs exactly once in `source`; else None."""
    state = _IndexState(module, set(nodes))
    state.indent_tokens = list(indent)
    try:
        statement._codegen(state)
    except _AllFound:
        pass
    text = "".join(state.tokens)
    at = source.find(text)
    if not text or at < 0 or source.find(text, at + 1) >= 0:
        return None
    if at > 0 and source[at - 1] != "\n":
        return None  # a statement starts a line; the tree is not this text's
    return _spans_of(state, nodes, source.count("\n", 0, at) + 1, at)


def _spans_of(state: _IndexState, nodes: Sequence[cst.CSTNode], line: int, offset: int) -> dict[int, Span]:
    """Spans from the token ranges `state` recorded; its tokens start at `line`, column 0, at
    character `offset`."""
    found = {id(n) for n in nodes if id(n) in state.ranges and id(n) in state.whole}
    indices = sorted({i for key in found for i in (*state.ranges[key], *state.whole[key])})
    where = _line_columns(state.tokens, indices, line)
    offsets = _offsets(state.tokens, indices)
    out = {}
    for key in found:
        a, b = state.ranges[key]
        c, d = state.whole[key]
        out[key] = Span(*where[a], *where[b], offset + offsets[c], offset + offsets[d], state.indents.get(key, ()))
    return out


_Anchor = tuple[cst.CSTNode, tuple[str, ...]]
_TOKEN_FIELDS = TOKEN_FIELDS
_INDENTING = (cst.IndentedBlock, cst.Match)  # the nodes that indent the code generated inside them
# (node type, whether token nodes are searched) → (indents, holds statements, fields to read)
_PLANS: dict[tuple[type, bool], tuple[bool, bool, tuple[str, ...]]] = {}


def _plan(kind: type, node: cst.CSTNode, tokens: bool) -> tuple[bool, bool, tuple[str, ...]]:
    fields = attributes_of(node)
    if not tokens:
        fields = tuple(f for f in fields if f not in _TOKEN_FIELDS and not f.startswith("whitespace"))
    plan = (kind in _INDENTING, kind is cst.IndentedBlock or kind is cst.Module, fields)
    _PLANS[(kind, tokens)] = plan
    return plan


def _anchors(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> dict[int, tuple[_Anchor, ...]]:
    """`id(node) → the statements that hold it, outermost first, each with the indentation it is
    generated at`, for each of `nodes` in `module` (a walk that stops once all are found). Only
    statements of a module's or an indented block's body count: each starts a line, and its
    code is generated the same way wherever it is generated from."""
    left = {id(n) for n in nodes}
    found: dict[int, tuple[_Anchor, ...]] = {}
    # Whitespace and punctuation hold no statement; walk into them only to find such a node.
    tokens = any(type(n) in TOKEN_NODES for n in nodes)
    skip: frozenset[type] = frozenset() if tokens else TOKEN_NODES
    plans = _PLANS
    default = module.default_indent
    held: list[_Anchor] = []
    indent: list[str] = []
    sentinel = cst.MaybeSentinel

    def walk(node: cst.CSTNode) -> None:
        key = id(node)
        if key in left:
            found[key] = tuple(held)
            left.discard(key)
            if not left:
                raise _AllFound
        kind = type(node)
        plan = plans.get((kind, tokens))
        pushes, bodies, fields = plan if plan is not None else _plan(kind, node, tokens)
        if pushes:
            value = node.indent  # type: ignore[attr-defined]
            indent.append(default if value is None else value)
        for field in fields:
            value = getattr(node, field)
            vkind = type(value)
            if vkind is tuple or vkind is list:
                if bodies and field == "body":
                    where = tuple(indent)
                    # Reported nodes are more often near a file's end: the walk stops sooner.
                    for child in (reversed(value) if kind is cst.Module else value):
                        held.append((child, where))
                        walk(child)
                        held.pop()
                else:
                    for child in value:
                        if type(child) not in skip:
                            walk(child)
            elif value is not None and vkind is not sentinel and vkind not in skip:
                walk(value)
        if pushes:
            indent.pop()

    try:
        walk(module)
    except _AllFound:
        pass
    return found


def node_ranges(module: cst.Module, nodes: Iterable[cst.CSTNode],
                source: str | None = None) -> dict[cst.CSTNode, tuple[int, int, int, int]]:
    """`node → (line, column, end_line, end_column)` (line 1-based, column 0-based, like libcst's
    CodeRange) for each of `nodes` found in `module` (parsed from `source`, when given: faster);
    nodes not in the tree are left out."""
    nodes = list(nodes)
    spans = node_spans(module, nodes, source)
    return {n: (spans[id(n)].line, spans[id(n)].column, spans[id(n)].end_line, spans[id(n)].end_column)
            for n in nodes if id(n) in spans}


def code_at(node: cst.CSTNode, span: Span, module: cst.Module) -> str:
    """`node`'s code generated where `span` is (at its indentation): the text to put there."""
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = list(span.indent)
    node._codegen(state)
    return "".join(state.tokens)


def _offsets(tokens: list[str], indices: list[int]) -> dict[int, int]:
    """The character offset after the first `i` tokens, for each sorted index `i`."""
    out: dict[int, int] = {}
    total, done = 0, 0
    for index in indices:
        total += sum(len(t) for t in tokens[done:index])
        done = index
        out[index] = total
    return out


def _line_columns(tokens: list[str], indices: list[int], line: int = 1) -> dict[int, tuple[int, int]]:
    """(line, column) after the first `i` tokens, for each sorted index `i`; the tokens start
    at `line`, column 0."""
    out: dict[int, tuple[int, int]] = {}
    column, done = 0, 0
    for index in indices:
        chunk = "".join(tokens[done:index])
        if "\r" in chunk:
            # A "\r" ending one token and a "\n" starting the next are two line ends to
            # PositionProvider (it splits token by token); keep its reading exactly.
            pieces: Iterable[str] = tokens[done:index]
        else:
            pieces = (chunk,)
        for piece in pieces:
            segments = _NEWLINE.split(piece)
            if len(segments) == 1:
                column += len(piece)
            else:
                line += len(segments) - 1
                column = len(segments[-1])
        done = index
        out[index] = (line, column)
    return out
