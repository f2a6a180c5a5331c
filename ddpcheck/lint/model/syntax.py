"""Small readers of libcst expressions that every layer of the model shares. None walks a file."""

from __future__ import annotations

from typing import Iterator, TypeGuard

import libcst as cst


def dotted(expr: cst.CSTNode | None) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    # Exact types (libcst's Name and Attribute have no subclasses): isinstance against them goes
    # through ABCMeta, and this runs for most expressions the model and the rules read.
    kind = type(expr)
    if kind is _NAME:
        return expr.value  # type: ignore[union-attr,no-any-return]
    parts = []
    while kind is _ATTRIBUTE:
        parts.append(expr.attr.value)  # type: ignore[union-attr]
        expr = expr.value  # type: ignore[union-attr]
        kind = type(expr)
    if kind is _NAME:
        parts.append(expr.value)  # type: ignore[union-attr]
        return ".".join(reversed(parts))
    return None


_NAME = cst.Name
_ATTRIBUTE = cst.Attribute


def annotation_name(expr: cst.BaseExpression | None) -> str | None:
    """The one class a type annotation names: `Exp`, `cfg.Exp`, `"Exp"`, `Optional[Exp]`,
    `Exp | None`; None for anything else (`list[Exp]`, `Exp | Other`)."""
    if isinstance(expr, cst.SimpleString):
        text = expr.evaluated_value
        if isinstance(text, str) and all(part.isidentifier() for part in text.split(".")):
            return text
        return None
    if isinstance(expr, cst.Subscript) and last_name(expr.value) == "Optional" and len(expr.slice) == 1:
        inner = expr.slice[0].slice
        return annotation_name(inner.value) if isinstance(inner, cst.Index) else None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
        sides = [expr.left, expr.right]
        named = [s for s in sides if not (isinstance(s, cst.Name) and s.value == "None")]
        return annotation_name(named[0]) if len(named) == 1 else None
    return dotted(expr)


def last_name(expr: cst.CSTNode | None) -> str | None:
    """`c` for `a.b.c` (the name a call or attribute chain ends in), else None."""
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    if isinstance(expr, cst.Name):
        return expr.value
    return None


# Whether a type is a CSTNode, asked once per type: isinstance against libcst's abstract CSTNode
# goes through ABCMeta each time, and `children` asks it for every field of every node.
_IS_NODE: dict[type, bool] = {}


def _is_node(value: object) -> bool:
    kind = type(value)
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = isinstance(value, cst.CSTNode)
    return known


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node.children` in source order, read from the node's fields (libcst's property rebuilds
    the node with a visitor to find them: many times slower)."""
    from ddpcheck.lint.traverse import attributes_of

    out: list[cst.CSTNode] = []
    is_node = _IS_NODE.get
    for attribute in attributes_of(node):
        value = getattr(node, attribute)
        kind = type(value)
        if kind is tuple or kind is list:
            for v in value:
                if is_node(type(v)) or _is_node(v):
                    out.append(v)
        elif is_node(kind) or _is_node(value):
            out.append(value)
    return out


def subexpressions(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and everything under it (for small subtrees: an argument, a condition)."""
    from ddpcheck.lint.traverse import attributes_of

    # `children` inlined: this runs for every node of the subtree.
    stack = [node]
    push = stack.append
    is_node = _IS_NODE.get
    while stack:
        current = stack.pop()
        yield current
        for attribute in attributes_of(current):
            value = getattr(current, attribute)
            kind = type(value)
            if kind is tuple or kind is list:
                for v in value:
                    if is_node(type(v)) or _is_node(v):
                        push(v)
            elif is_node(kind) or _is_node(value):
                push(value)


# Per node type, its fields less those that hold only token nodes (traverse.TOKEN_FIELDS).
_EXPRESSION_FIELDS: dict[type, tuple[str, ...]] = {}


def _expression_fields(node: cst.CSTNode) -> tuple[str, ...]:
    from ddpcheck.lint.traverse import attributes_of, token_field

    fields = _EXPRESSION_FIELDS[type(node)] = tuple(a for a in attributes_of(node) if not token_field(a))
    return fields


def expressions(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """What `subexpressions(node)` yields, in the same order, less the token nodes (whitespace,
    punctuation, operators: traverse.TOKEN_NODES, below which there are only tokens): for
    searches for calls, names, subscripts. About half of a body's nodes are tokens."""
    from ddpcheck.lint.traverse import TOKEN_NODES

    stack = [node]
    push = stack.append
    is_node = _IS_NODE.get
    fields_of = _EXPRESSION_FIELDS.get
    while stack:
        current = stack.pop()
        yield current
        fields = fields_of(type(current))
        if fields is None:
            fields = _expression_fields(current)
        for attribute in fields:
            value = getattr(current, attribute)
            kind = type(value)
            if kind is tuple or kind is list:
                for v in value:
                    vkind = type(v)
                    if vkind not in TOKEN_NODES and (is_node(vkind) or _is_node(v)):
                        push(v)
            elif kind not in TOKEN_NODES and (is_node(kind) or _is_node(value)):
                push(value)


def inner_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`children(node)` less the token nodes (whitespace, punctuation, operators), below which
    there are only tokens: for searches that never stop at a token."""
    from ddpcheck.lint.traverse import TOKEN_NODES

    out: list[cst.CSTNode] = []
    is_node = _IS_NODE.get
    fields = _EXPRESSION_FIELDS.get(type(node))
    if fields is None:
        fields = _expression_fields(node)
    for attribute in fields:
        value = getattr(node, attribute)
        kind = type(value)
        if kind is tuple or kind is list:
            for v in value:
                vkind = type(v)
                if vkind not in TOKEN_NODES and (is_node(vkind) or _is_node(v)):
                    out.append(v)
        elif kind not in TOKEN_NODES and (is_node(kind) or _is_node(value)):
            out.append(value)
    return out


def statements(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """What `subexpressions(node)` yields, in the same order, less the token nodes and what
    lies below nodes that hold no statement (expressions, small statements): for searches for
    statements (`x = ...`, `try`, loops)."""
    from ddpcheck.lint.traverse import NO_STATEMENTS_BELOW

    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if type(current) not in NO_STATEMENTS_BELOW:
            stack.extend(inner_children(current))


def string_text(expr: cst.CSTNode | None) -> str | None:
    """The literal text of a plain string, or the literal head of an f-string (`f"cuda:{i}"`
    → "cuda:")."""
    if isinstance(expr, cst.SimpleString):
        raw = expr.value
        if raw[0] in "'\"" and "\\" not in raw and "\r" not in raw:
            # No prefix, no escape: the text between the quotes (literal_eval, which
            # evaluated_value runs, compiles the literal).
            return raw[3:-3] if len(raw) >= 6 and raw[:3] == raw[0] * 3 else raw[1:-1]
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - odd literals (bytes with escapes) are simply not text
            return None
        return value if isinstance(value, str) else None
    if isinstance(expr, cst.FormattedString):
        head = expr.parts[0] if expr.parts else None
        return head.value if isinstance(head, cst.FormattedStringText) else ""
    if isinstance(expr, cst.ConcatenatedString):
        return string_text(expr.left)
    return None


def is_none(expr: object) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def is_true(expr: object) -> TypeGuard[cst.Name]:
    return isinstance(expr, cst.Name) and expr.value == "True"


def is_false(expr: object) -> TypeGuard[cst.Name]:
    return isinstance(expr, cst.Name) and expr.value == "False"


def int_value(expr: cst.CSTNode | None) -> int | None:
    """The value of an integer literal, negative ones included (`-1`)."""
    if isinstance(expr, cst.Integer):
        try:
            return int(expr.evaluated_value)
        except ValueError:
            return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = int_value(expr.expression)
        return None if inner is None else -inner
    return None


def argument(call: cst.Call, keyword: str, position: int | None = None) -> cst.BaseExpression | None:
    """The argument passed as `keyword=` or, failing that, at `position` (before any `*args`)."""
    positional = 0
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value == keyword:
                return a.value
        elif a.star:
            if a.star == "*":
                position = None  # later positions are unknown
            continue
        else:
            if position is not None and positional == position:
                return a.value
            positional += 1
    return None


def has_keyword(call: cst.Call, keyword: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == keyword for a in call.args)


def has_star_kwargs(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)
