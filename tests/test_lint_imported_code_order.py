"""The code a `from module import name` brings into a run is read in the module's own order, and
reads the same on every run: the readers of that text (which draws random numbers, which networks
it builds) match patterns across statements, so a text glued in another order gave another answer
from one run to the next."""

from __future__ import annotations

import ast

from ddpcheck.lint.model.imported_code import code_reached

# The file's last statement runs at import and ends without a new line; the definitions it
# reaches come before it.
MODULE = (
    "import torch\n"
    "\n"
    "def jitter(x):\n"
    "    return x + torch.rand(x.shape)\n"
    "\n"
    "def build():\n"
    "    return Net(jitter)\n"
    "\n"
    "class Net:\n"
    "    def __init__(self, fn):\n"
    "        self.fn = fn\n"
    "\n"
    "def unused():\n"
    "    return 0\n"
    "\n"
    "DEFAULT = build()"
)


def test_the_reached_code_keeps_the_modules_order_and_parses() -> None:
    text = code_reached(MODULE, frozenset({"Net"}))
    tree = ast.parse(text)  # the last line no longer runs into the next definition
    names = [getattr(node, "name", None) or ast.unparse(node) for node in tree.body]
    assert names == ["import torch", "jitter", "build", "Net", "DEFAULT = build()"]


def test_the_reached_code_is_the_same_whatever_names_are_asked_in_whatever_order() -> None:
    one = code_reached(MODULE, frozenset({"jitter", "build", "Net"}))
    other = code_reached(MODULE + "\n", frozenset({"Net", "build"}))
    assert one == other
    assert "def unused" not in one
