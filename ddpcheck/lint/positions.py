"""Exact line/column ranges for the few nodes that get a finding, without libcst's PositionProvider.

PositionProvider re-generates the file and updates a line/column pair for every token (a regex
split per token and a CodePosition per node): on the bench corpus that costs more than the parse
itself. Here the same code generation runs with libcst's plain CodegenState, which only appends
tokens; each node's range is kept as token indices (the same rules PositionProvider applies:
syntactic ranges first, hoisted from start/end children, else the whitespace-inclusive range),
and only the requested nodes' indices are turned into lines and columns, by counting newlines in
the joined text between them. The results equal PositionProvider's (tests/test_positions.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal

import libcst as cst
from libcst._nodes.internal import CodegenState

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


def node_spans(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[int, Span]:
    """`id(node) → Span` for each of `nodes` found in `module` (one code generation, stopped
    after the last of them)."""
    nodes = list(nodes)
    state = _IndexState(module, set(nodes))
    try:
        module._codegen(state)
    except _AllFound:
        pass
    found = {id(n) for n in nodes if id(n) in state.ranges and id(n) in state.whole}
    indices = sorted({i for key in found for i in (*state.ranges[key], *state.whole[key])})
    where = _line_columns(state.tokens, indices)
    offsets = _offsets(state.tokens, indices)
    out = {}
    for key in found:
        a, b = state.ranges[key]
        c, d = state.whole[key]
        out[key] = Span(*where[a], *where[b], offsets[c], offsets[d], state.indents.get(key, ()))
    return out


def node_ranges(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int, int, int]]:
    """`node → (line, column, end_line, end_column)` (line 1-based, column 0-based, like libcst's
    CodeRange) for each of `nodes` found in `module`; nodes not in the tree are left out."""
    nodes = list(nodes)
    spans = node_spans(module, nodes)
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


def _line_columns(tokens: list[str], indices: list[int]) -> dict[int, tuple[int, int]]:
    """(line, column) after the first `i` tokens, for each sorted index `i`."""
    out: dict[int, tuple[int, int]] = {}
    line, column, done = 1, 0, 0
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
