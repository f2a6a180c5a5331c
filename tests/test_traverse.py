"""lint/traverse.py must make exactly the visitor calls libcst's own `visit` makes, in order."""

from __future__ import annotations

import sys

import libcst as cst
import pytest

from ddpcheck.lint import traverse
from tests.conftest import ROOT

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
