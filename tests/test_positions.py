"""Finding positions come from lint/positions.py; they must equal libcst's PositionProvider exactly."""

from __future__ import annotations

import random
import sys

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from ddpcheck.lint.positions import node_ranges
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from corpus import ddp_script  # noqa: E402  (bench/ is not a package)

ODD_FILES = {
    "crlf": 'import torch\r\nx = (1,\r\n  2)\r\nif x:\r\n    y = "a\\\r\nb"\r\n',
    "cr_only": "import os\rx = 1\rdef f():\r    return x\r",
    "tabs_unicode": "def f():\n\tname = 'é漢字'; z = name  # ☃\n\treturn [\n\t\tz,\n\t]\n",
    "no_trailing_newline": "import torch.distributed as dist\ndist.barrier()",
    "decorators_comments": "\n\n# lead\n@a.b(c)\n@d\nclass K(Base, metaclass=M):  # c\n    '''doc'''\n\n    x: int = 1\n",
    "empty": "",
}


def _expected(module):
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {n: (r.start.line, r.start.column, r.end.line, r.end.column) for n, r in positions.items()}


SOURCES = [pytest.param(ddp_script(i), id=f"corpus{i}") for i in (0, 7, 31, 64)] + [
    pytest.param(src, id=name) for name, src in ODD_FILES.items()
]


@pytest.mark.parametrize("source", SOURCES)
def test_every_node_matches_position_provider(source):
    module = cst.parse_module(source)
    expected = _expected(module)
    assert node_ranges(module, expected) == expected


@pytest.mark.parametrize("source", SOURCES)
def test_a_few_nodes_match_too(source):
    # The engine asks for the reported nodes only, and stops generating code once it has them.
    module = cst.parse_module(source)
    expected = _expected(module)
    nodes = list(expected)
    rnd = random.Random(len(source))
    for _ in range(20):
        some = rnd.sample(nodes, min(len(nodes), rnd.randint(1, 4)))
        assert node_ranges(module, some) == {n: expected[n] for n in some}


def test_nodes_outside_the_tree_are_left_out():
    module = cst.parse_module("x = 1\n")
    stranger = cst.Name("y")
    assert node_ranges(module, [stranger]) == {}
