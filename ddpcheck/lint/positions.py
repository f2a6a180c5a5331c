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
from contextlib import contextmanager
from typing import Iterable, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

# PositionProvider's own newline rule: "\r\n", "\r" or "\n" each end a line.
_NEWLINE = re.compile(r"\r\n?|\n")


class _AllFound(Exception):
    pass


class _IndexState(CodegenState):
    """Code generation that records, per node, the token index where it starts and ends."""

    def __init__(self, module: cst.Module, wanted: set[cst.CSTNode]) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.ranges: dict[cst.CSTNode, tuple[int, int]] = {}
        self._stack: list[int] = []
        self._left = set(wanted)  # requested nodes whose range is not complete yet

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        if node not in self.ranges:  # a syntactic range recorded inside wins, as in PositionProvider
            self.ranges[node] = (start, len(self.tokens))
        if node in self._left:
            self._left.discard(node)
            if not self._left:
                raise _AllFound  # the rest of the file cannot change these ranges

    @contextmanager
    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> Iterator[None]:
        start = len(self.tokens)
        yield  # no try/finally: when _AllFound stops the generation, nothing more is recorded
        end = len(self.tokens)
        if start_node is not None:
            start = self.ranges[start_node][0]
        if end_node is not None:
            end = self.ranges[end_node][1]
        self.ranges[node] = (start, end)

    def pop_trailing_newline(self) -> None:
        # PositionProvider computed its positions before this pop; keep the token so ours match.
        pass


def node_ranges(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int, int, int]]:
    """`node → (line, column, end_line, end_column)` (line 1-based, column 0-based, like libcst's
    CodeRange) for each of `nodes` found in `module`; nodes not in the tree are left out."""
    nodes = list(nodes)
    state = _IndexState(module, set(nodes))
    try:
        module._codegen(state)
    except _AllFound:
        pass
    wanted = {}
    for node in nodes:
        rng = state.ranges.get(node)
        if rng is not None:
            wanted[node] = rng
    indices = sorted({i for rng in wanted.values() for i in rng})
    where = _line_columns(state.tokens, indices)
    return {node: (*where[a], *where[b]) for node, (a, b) in wanted.items()}


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
