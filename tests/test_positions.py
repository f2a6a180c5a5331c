"""Finding positions come from lint/positions.py; they must equal libcst's PositionProvider exactly."""

from __future__ import annotations

import random
import sys

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpcheck.lint.positions import node_ranges, node_spans
from tests.conftest import ROOT
from tests.helpers import libcst_field_types

sys.path.insert(0, str(ROOT / "bench"))
from corpus import ddp_script  # noqa: E402  (bench/ is not a package)

ODD_FILES = {
    "crlf": 'import torch\r\nx = (1,\r\n  2)\r\nif x:\r\n    y = "a\\\r\nb"\r\n',
    "cr_only": "import os\rx = 1\rdef f():\r    return x\r",
    "tabs_unicode": "def f():\n\tname = 'é漢字'; z = name  # ☃\n\treturn [\n\t\tz,\n\t]\n",
    "no_trailing_newline": "import torch.distributed as dist\ndist.barrier()",
    "decorators_comments": "\n\n# lead\n@a.b(c)\n@d\nclass K(Base, metaclass=M):  # c\n    '''doc'''\n\n    x: int = 1\n",
    "empty": "",
    # The same statement text in several places: a position must not be taken from the wrong one.
    "repeated_statements": (
        "import torch\n\n\ndef step(model, opt):\n    loss = model()\n    loss.backward()\n    opt.step()\n\n\n"
        "def step2(model, opt):\n    loss = model()\n    loss.backward()\n    opt.step()\n\n\n"
        "for _ in range(2):\n    loss = model()\n    loss.backward()\n\nloss = model()\nloss.backward()\n"
        "class A:\n    def f(self):\n        pass\nclass B:\n    def f(self):\n        pass\n"
    ),
    # Blocks indented differently from the file's default, a match statement, clauses, a
    # one-line suite, comments at odd indentation and a string with lines at column 0.
    "mixed_indentation": (
        "def f(x):\n  if x:\n      y = 1\n  # c\n        # deeper\n  else:\n    y = 2\n  return y\n"
        "match f(1):\n    case 1:\n        z = '''\nx = 1\n'''\n    case _:\n      pass\n"
        "try:\n    pass\nexcept E:  # e\n    if a: b()\nfinally:\n\tpass\n"
        "@dec\n\n# between\n@dec2(\n    1)\nasync def g():\n    async with a as b: await c\n"
    ),
}


def _expected(module):
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {n: (r.start.line, r.start.column, r.end.line, r.end.column) for n, r in positions.items()}


SOURCES = [pytest.param(ddp_script(i), id=f"corpus{i}") for i in (0, 7, 31, 64)] + [
    pytest.param(src, id=name) for name, src in ODD_FILES.items()
]


# Without the text, the module is generated up to the last node asked for; with it (as the
# engine asks), only the statements that hold them.
WITH_TEXT = pytest.mark.parametrize("with_text", [False, True], ids=["tree", "tree+text"])


@WITH_TEXT
@pytest.mark.parametrize("source", SOURCES)
def test_every_node_matches_position_provider(source, with_text):
    module = cst.parse_module(source)
    expected = _expected(module)
    assert node_ranges(module, expected, source if with_text else None) == expected


@WITH_TEXT
@pytest.mark.parametrize("source", SOURCES)
def test_a_few_nodes_match_too(source, with_text):
    # The engine asks for the reported nodes only.
    module = cst.parse_module(source)
    expected = _expected(module)
    nodes = list(expected)
    rnd = random.Random(len(source))
    for _ in range(20):
        some = rnd.sample(nodes, min(len(nodes), rnd.randint(1, 4)))
        assert node_ranges(module, some, source if with_text else None) == {n: expected[n] for n in some}


@pytest.mark.parametrize("source", SOURCES)
def test_each_node_alone_matches(source):
    # One node at a time: its own statement, however short and however often its text recurs.
    # In the long generated scripts: the first node of every type and a fixed random sample (each
    # call searches the text again, so every node of a 2,000-line script would take a minute).
    module = cst.parse_module(source)
    expected = _expected(module)
    nodes = list(expected)
    if len(nodes) > 1500:
        first_of_type = {type(n): n for n in reversed(nodes)}
        nodes = list({*first_of_type.values(), *random.Random(len(source)).sample(nodes, 600)})
    for node in nodes:
        assert node_ranges(module, [node], source) == {node: expected[node]}, type(node).__name__


def test_edit_offsets_and_indentation_are_the_same_with_the_text():
    # Fixes are cut from the text at these offsets and generated at this indentation. In the
    # generated script (over 5,000 nodes), as in test_each_node_alone_matches: the first node of
    # every type and a fixed random sample, since each call searches the text again.
    for source in (ddp_script(3), ODD_FILES["mixed_indentation"], ODD_FILES["repeated_statements"]):
        module = cst.parse_module(source)
        nodes = list(_expected(module))
        whole = node_spans(module, nodes)
        if len(nodes) > 1500:
            first_of_type = {type(n): n for n in reversed(nodes)}
            nodes = list({*first_of_type.values(), *random.Random(len(source)).sample(nodes, 600)})
        for node in nodes:
            assert node_spans(module, [node], source) == {id(node): whole[id(node)]}


def test_the_fields_the_search_skips_hold_only_tokens():
    # The statement search does not read these fields; a libcst release that put an expression
    # or a statement in one would make positions silently fall back or go missing.
    from ddpcheck.lint.positions import _TOKEN_FIELDS
    from ddpcheck.lint.traverse import TOKEN_NODES

    for node_type, name, held in libcst_field_types():
        if name in _TOKEN_FIELDS or name.startswith("whitespace"):
            assert held <= TOKEN_NODES, (node_type.__name__, name)


def test_nodes_outside_the_tree_are_left_out():
    module = cst.parse_module("x = 1\n")
    stranger = cst.Name("y")
    assert node_ranges(module, [stranger]) == {}
    assert node_ranges(module, [stranger], "x = 1\n") == {}
