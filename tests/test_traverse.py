"""lint/traverse.py must make exactly the visitor calls libcst's own `visit` makes, in order."""

from __future__ import annotations

import sys

import libcst as cst
import pytest

from ddpcheck.lint import traverse
from tests.conftest import ROOT
from tests.helpers import libcst_field_types

sys.path.insert(0, str(ROOT / "bench"))
from corpus import _plain_module, ddp_script  # noqa: E402  (bench/ is not a package)

EXTRA = '''
from . import a
from .b import *
from x import (y as z, w)
import a.b.c as d
x = f"{a!r:>{width}} {b=} {c:.2f} {d}"
lam = lambda q, *r, s=1, **t: (q, r, s, t)
@dec(1)
async def g(a, /, b, *, c: int = 2) -> "T":
    async with x as (y, z), w:
        async for i in y:
            await i
    try:
        pass
    except* ValueError as e:
        raise
    finally:
        del a[1:2, ::3]
    match b:
        case [1, *rest] if rest: pass
        case {"k": v, **kw}: pass
        case Point(x=0) | None: pass
    return [i for i in range(3) if i] + {k: v for k, v in {}.items()} + (yield from gen())
class K(B, metaclass=M):
    x: int = 1; y = z = 2
    while x: x -= 1
    else: pass
if a: b
elif c: d
else: e
global q
assert x, "m"
with open(p) as f: f.read()
print(*a, **k, sep="")
t = a if b else c
n = not -~a ** b @ c // d << e & f ^ g | h < i is not j in k and l or m
'''


class Recorder(cst.CSTVisitor):
    def __init__(self):
        super().__init__()
        self.events = []

    def on_visit(self, node):
        self.events.append(("visit", id(node)))
        return not isinstance(node, cst.Lambda)  # also check that False stops the descent

    def on_leave(self, original_node):
        self.events.append(("leave", id(original_node)))

    def on_visit_attribute(self, node, attribute):
        self.events.append(("attr", id(node), attribute))

    def on_leave_attribute(self, original_node, attribute):
        self.events.append(("attr_end", id(original_node), attribute))


SOURCES = [pytest.param(ddp_script(i), id=f"ddp{i}") for i in (0, 3, 12, 40, 77)] + [
    pytest.param(_plain_module(__import__("random").Random(5), 5), id="plain"),
    pytest.param(EXTRA, id="syntax-zoo"),
]


@pytest.mark.parametrize("source", SOURCES)
def test_same_calls_in_the_same_order_as_libcst(source):
    module = cst.parse_module(source)
    theirs, ours = Recorder(), Recorder()
    module.visit(theirs)
    traverse.visit(module, ours)
    assert len(ours.events) > 100
    assert ours.events == theirs.events


class Collect(cst.CSTVisitor):
    def __init__(self):
        super().__init__()
        self.calls, self.lines = [], []

    def visit_Call(self, node):
        self.calls.append(node)

    def visit_SimpleStatementLine(self, node):
        self.lines.append(node)


@pytest.mark.parametrize("source", SOURCES)
def test_replace_gives_the_same_code_as_deep_replace(source):
    import random

    module = cst.parse_module(source)
    found = Collect()
    module.visit(found)
    rnd = random.Random(1)
    pairs = [(c, cst.Name("REPLACED")) for c in rnd.sample(found.calls, min(8, len(found.calls)))]
    pairs += [(s, cst.parse_statement("pass\n")) for s in rnd.sample(found.lines, min(8, len(found.lines)))]
    for old, new in pairs:
        assert traverse.replace(module, old, new).code == module.deep_replace(old, new).code
    assert traverse.replace(module, cst.Name("stranger"), cst.Name("x")).code == module.code


def test_punctuation_fields_hold_only_tokens_without_comments():
    # The model's walk does not read these fields when it enters comments and no other token
    # node; a libcst release that put a comment (or an expression) below one would hide it.
    assert traverse.PUNCTUATION_FIELDS <= traverse.TOKEN_FIELDS
    plain_tokens = traverse.TOKEN_NODES - traverse.COMMENT_HOLDERS
    checked = set()
    for node_type, name, held in libcst_field_types():
        if name in traverse.PUNCTUATION_FIELDS:
            checked.add(name)
            assert held <= plain_tokens, (node_type.__name__, name, held - plain_tokens)
    assert checked == traverse.PUNCTUATION_FIELDS


@pytest.mark.parametrize("source", SOURCES)
def test_expressions_are_the_subexpressions_less_tokens(source):
    from ddpcheck.lint.model.syntax import expressions, subexpressions

    module = cst.parse_module(source)
    for statement in module.body:
        theirs = [n for n in subexpressions(statement) if n is statement or type(n) not in traverse.TOKEN_NODES]
        # subexpressions goes below token nodes (a comment in a parenthesized line break):
        # expressions does not, and nothing but tokens is there.
        outside = _outside_tokens(statement)
        assert [id(n) for n in expressions(statement)] == [id(n) for n in theirs if id(n) in outside]


def _outside_tokens(root) -> set[int]:
    """The ids of the nodes of `root`'s tree that are not below a token node (the root itself and
    the token nodes on the way included): one walk per statement, not one search per node."""
    from ddpcheck.lint.model.syntax import children

    outside: set[int] = set()

    def visit(node, top: bool) -> None:
        outside.add(id(node))
        if top or type(node) not in traverse.TOKEN_NODES:
            for child in children(node):
                visit(child, False)

    visit(root, True)
    return outside


@pytest.mark.parametrize("comments", [False, True])
@pytest.mark.parametrize("source", SOURCES)
def test_model_walk_meets_every_node_a_hook_asks_for(source, comments):
    # The walk leaves out the fields that hold only skipped nodes: the hooks still see every
    # node of their types that libcst's visit meets outside token nodes (and comments, when asked).
    from ddpcheck.lint.model.build import walk
    from ddpcheck.lint.model.module import ModuleModel

    source = source + "x = f(a,  # a comment inside the call\n      b)  # and after it\n"
    module = cst.parse_module(source)
    kinds = (cst.Name, cst.Call, cst.Attribute) + ((cst.Comment,) if comments else ())
    seen = []
    hooks = {k: [seen.append] for k in kinds}
    walk(ModuleModel("m.py", source, module), hooks, {})

    class All(cst.CSTVisitor):
        def __init__(self):
            super().__init__()
            self.nodes = []
            self.depth = 0  # inside a skipped token node

        def on_visit(self, node):
            skipped = type(node) in traverse.TOKEN_NODES and not (
                comments and type(node) in traverse.COMMENT_HOLDERS)
            if self.depth == 0 and isinstance(node, kinds):
                self.nodes.append(node)
            if skipped:
                self.depth += 1
            return True

        def on_leave(self, node):
            if type(node) in traverse.TOKEN_NODES and not (comments and type(node) in traverse.COMMENT_HOLDERS):
                self.depth -= 1

    everything = All()
    module.visit(everything)
    assert [id(n) for n in seen] == [id(n) for n in everything.nodes]
    assert any(isinstance(n, cst.Comment) for n in seen) == comments


@pytest.mark.parametrize("source", SOURCES)
def test_inner_children_are_the_children_less_tokens(source):
    from ddpcheck.lint.model.syntax import children, inner_children

    stack = [cst.parse_module(source)]
    while stack:
        node = stack.pop()
        assert [id(c) for c in inner_children(node)] == [
            id(c) for c in children(node) if type(c) not in traverse.TOKEN_NODES]
        stack.extend(children(node))


@pytest.mark.parametrize("literal", [
    '""', "''", '"""x"""', "''''''", '"a b"', '"""two\nlines"""', "'\\n'", "r'\\d'", "b'x'",
    "u'x'", '"caf\u00e9"', "'''a \"quoted\" word'''", "'\\\\'",
])
def test_string_text_reads_literals_as_python_does(literal):
    from ddpcheck.lint.model.syntax import string_text

    node = cst.parse_expression(literal)
    expected = eval(literal)  # noqa: S307 - the test's own literals
    assert string_text(node) == (expected if isinstance(expected, str) else None)
