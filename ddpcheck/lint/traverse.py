"""A read-only traversal that makes the same visitor calls as `node.visit(visitor)`, at a fraction
of the cost.

libcst's `visit` rebuilds every node from its visited children (`_visit_and_replace_children`)
even for a plain CSTVisitor that changes nothing; on the bench corpus that doubles the cost of
the parse. This walker reads the children instead. It calls `on_visit`, `on_visit_attribute`,
`on_leave_attribute` and `on_leave` in libcst's order: the attribute order of each node type is
taken from libcst itself, once per type, by letting `_visit_and_replace_children` run with a
visitor that does not descend. tests/test_traverse.py checks the call sequence against libcst's.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import libcst as cst
from libcst._nodes.base import CSTNode

_ORDER: dict[type, tuple[str, ...]] = {}
# Attributes libcst visits only when set (everything else is visited even when None).
ONLY_WHEN_SET = frozenset({"format_spec"})
_ONLY_WHEN_SET = ONLY_WHEN_SET


class _Probe(cst.CSTVisitor):
    """Records the attributes libcst visits on one node, without going below it."""

    def __init__(self, parent: cst.CSTNode) -> None:
        super().__init__()
        self.parent = parent
        self.attributes: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        pass

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if node is self.parent:
            self.attributes.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


def _no_validation(self: CSTNode) -> None:
    return None


@contextmanager
def unvalidated() -> Iterator[None]:
    """Build libcst nodes without libcst's node checks. A few of them reject valid Python (a
    comprehension's element glued to `for`: `[(a if c else b)for a in xs]`), so a tree parsed from
    such a file could not be rebuilt from its own children; a tree parsed from text Python reads
    needs no check. (A linting process runs one thread.)"""
    validate = CSTNode.__post_init__
    CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        yield
    finally:
        CSTNode.__post_init__ = validate  # type: ignore[method-assign]


def _order(node: cst.CSTNode) -> tuple[str, ...]:
    probe = _Probe(node)
    with unvalidated():  # the probe rebuilds the node from its own children: nothing new to check
        node._visit_and_replace_children(probe)
    attributes = probe.attributes
    for name in _ONLY_WHEN_SET:
        # Learnt from a node where it was unset: it comes last when present (f-string `{x:spec}`).
        if hasattr(node, name) and name not in attributes:
            attributes.append(name)
    order = tuple(attributes)
    _ORDER[type(node)] = order
    return order


def attributes_of(node: cst.CSTNode) -> tuple[str, ...]:
    """The fields of `node` that hold child nodes, in libcst's (source) order."""
    order = _ORDER.get(type(node))
    return order if order is not None else _order(node)


def visit(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Walk `node` and everything below it with `visitor` (a CSTVisitor; nothing is replaced)."""
    on_visit = visitor.on_visit
    on_leave = visitor.on_leave
    on_visit_attribute = visitor.on_visit_attribute
    on_leave_attribute = visitor.on_leave_attribute
    order_of = _ORDER.get
    sentinel = cst.MaybeSentinel

    def walk(node: cst.CSTNode) -> None:
        if on_visit(node):
            order = order_of(type(node))
            if order is None:
                order = _order(node)
            for attribute in order:
                value = getattr(node, attribute)
                if value is None and attribute in _ONLY_WHEN_SET:
                    continue
                on_visit_attribute(node, attribute)
                # A visited attribute holds a node, a sequence of nodes, None or MaybeSentinel
                # (type checks: isinstance against libcst's abstract CSTNode is slow).
                kind = type(value)
                if kind is tuple or kind is list:
                    for child in value:
                        walk(child)
                elif value is not None and kind is not sentinel:
                    walk(value)
                on_leave_attribute(node, attribute)
        on_leave(node)

    walk(node)


_OPERATOR_BASES = (cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp)
# Nodes that hold only whitespace, punctuation or an operator token: nothing below them is a call,
# a binding or a block, so a model-building walk need not go into them.
TOKEN_NODES: frozenset[type] = frozenset({
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.EmptyLine,
    cst.Newline, cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.AssignEqual, cst.Semicolon,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
    cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.ImportStar,
}) | frozenset(
    # Read from each class's MRO: issubclass on these ABCs walks every registered subclass (25 ms
    # at import, a tenth of linting one file).
    t for t in vars(cst).values() if isinstance(t, type) and t not in _OPERATOR_BASES
    and any(base in t.__mro__ for base in _OPERATOR_BASES)
)
# Nodes below which no statement can be (expressions, small statements, tokens): a walk looking
# for statements need not go into them. A lambda's body is an expression.
NO_STATEMENTS_BELOW: frozenset[type] = TOKEN_NODES | frozenset({cst.Decorator, cst.Parameters}) | frozenset(
    t for t in vars(cst).values() if isinstance(t, type)
    and any(base in t.__mro__ for base in (cst.BaseExpression, cst.BaseSmallStatement))
)
# The same, and the lines and suites of small statements: a walk looking for compound
# statements (loops, `try`, `def`) need not go into them.
NO_STATEMENTS: frozenset[type] = NO_STATEMENTS_BELOW | frozenset({cst.SimpleStatementLine, cst.SimpleStatementSuite})
# The nodes that can hold a Comment (a walk that wants comments must go into them).
COMMENT_HOLDERS: frozenset[type] = frozenset({
    cst.Comment, cst.TrailingWhitespace, cst.EmptyLine, cst.ParenthesizedWhitespace,
})
# Fields that hold only token nodes (whitespace, comments, punctuation or operators), as does
# every field whose name starts with "whitespace": a search for other nodes never reads them.
TOKEN_FIELDS = frozenset({
    "colon", "comma", "comment", "dot", "empty_lines", "equal", "first_colon", "first_line", "footer",
    "header", "last_line", "lbrace", "lbracket", "leading_lines", "leading_whitespace",
    "lines_after_decorators", "lpar", "newline", "operator", "rbrace", "rbracket", "relative", "rpar",
    "second_colon", "semicolon", "separator", "trailing_comma", "trailing_whitespace",
})
# Of those, the fields whose nodes are token nodes that hold no comment (punctuation, operators):
# a walk that enters comments, and no other token node, need not read them.
PUNCTUATION_FIELDS = frozenset({
    "colon", "comma", "dot", "equal", "first_colon", "lbrace", "lbracket", "lpar", "operator", "rbrace",
    "rbracket", "relative", "rpar", "second_colon", "semicolon",
})
# (tests/test_positions.py checks both against libcst's field types.)


def token_field(name: str) -> bool:
    return name in TOKEN_FIELDS or name.startswith("whitespace")
_SELECTED: dict[tuple[type, frozenset[tuple[type, str]]], tuple[tuple[str, bool], ...]] = {}


def visit_selected(node: cst.CSTNode, visitor: cst.CSTVisitor, attributes: frozenset[tuple[type, str]],
                   skip: frozenset[type]) -> None:
    """`visit`, calling `on_visit_attribute`/`on_leave_attribute` only for the (node type,
    attribute) pairs in `attributes`, and not entering nodes whose type is in `skip` (they get
    no on_visit/on_leave either). The visit order of the other nodes is libcst's."""
    on_visit = visitor.on_visit
    on_leave = visitor.on_leave
    on_visit_attribute = visitor.on_visit_attribute
    on_leave_attribute = visitor.on_leave_attribute
    sentinel = cst.MaybeSentinel

    def plan(kind: type, node: cst.CSTNode) -> tuple[tuple[str, bool], ...]:
        found = _SELECTED.get((kind, attributes))
        if found is None:
            order = _ORDER.get(kind) or _order(node)
            found = tuple((a, (kind, a) in attributes) for a in order)
            _SELECTED[(kind, attributes)] = found
        return found

    def walk(node: cst.CSTNode) -> None:
        kind = type(node)
        if on_visit(node):
            for attribute, hooked in plan(kind, node):
                value = getattr(node, attribute)
                if value is None and attribute in _ONLY_WHEN_SET:
                    continue
                if hooked:
                    on_visit_attribute(node, attribute)
                vkind = type(value)
                if vkind is tuple or vkind is list:
                    for child in value:
                        if type(child) not in skip:
                            walk(child)
                elif value is not None and vkind is not sentinel and vkind not in skip:
                    walk(value)
                if hooked:
                    on_leave_attribute(node, attribute)
        on_leave(node)

    walk(node)


def replace(root: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    """`root.deep_replace(old, new)` for a node replaced by a node, rebuilding only the path from
    `root` down to `old` (deep_replace rebuilds the whole tree). Same resulting tree."""
    if not isinstance(new, cst.CSTNode):
        with unvalidated():  # (the rest of the tree is rebuilt as it was parsed)
            return root.deep_replace(old, new)  # removals and flattening: libcst's own way
    path: list[tuple[cst.CSTNode, str]] = []
    if not _path_to(root, old, path):
        return root
    child_old, child_new = old, new
    for parent, attribute in reversed(path):
        value = getattr(parent, attribute)
        if type(value) is tuple or type(value) is list:
            value = type(value)(child_new if c is child_old else c for c in value)
        else:
            value = child_new
        child_old, child_new = parent, parent.with_changes(**{attribute: value})
    return child_new


def _path_to(node: cst.CSTNode, target: cst.CSTNode, path: list[tuple[cst.CSTNode, str]]) -> bool:
    if node is target:
        return True
    order = _ORDER.get(type(node))
    if order is None:
        order = _order(node)
    for attribute in order:
        value = getattr(node, attribute)
        kind = type(value)
        children = value if kind is tuple or kind is list else (value,)
        for child in children:
            if child is None or type(child) is cst.MaybeSentinel:
                continue
            path.append((node, attribute))
            if _path_to(child, target, path):
                return True
            path.pop()
    return False
