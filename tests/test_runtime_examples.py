"""The examples of runtime checks and ddpcheck's own codes: the same names as a static rule's
(INVALID programs are reported, VALID ones are not), and each one a Python program.

A static rule's examples are linted (tests/test_rule_examples.py). A runtime check's cannot be
run here: they are fragments of a distributed job. What can be checked without a job is that each
is a program a reader could paste (it parses), that the page shows a pair, and that the examples
are a sequence of programs, never one bare string (a string is a sequence of characters: an
INVALID set to a string would pass the type checker and turn the page's example into one letter).
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from ddpcheck.catalog import classes, code_named

# What this code reports is a file that does not parse: its INVALID example must not.
SYNTAX_ERROR = code_named("syntax-error", "tool")


def _examples():
    for code, cls in classes("run", "tool").items():
        for kind in ("INVALID", "VALID"):
            for i, example in enumerate(getattr(cls, kind)):
                parses = not (code == SYNTAX_ERROR and kind == "INVALID")
                yield pytest.param(example, parses, id=f"{code}-{kind.lower()}-{i}")


def test_runtime_checks_are_seen():
    # Guards the guard: the parametrised tests below run over the checks.
    assert len(classes("run")) > 30
    assert len(list(_examples())) > 60


@pytest.mark.parametrize(("example", "parses"), list(_examples()))
def test_an_example_is_a_python_program(example, parses):
    assert isinstance(example, str)
    source = textwrap.dedent(example).strip("\n")
    assert source.strip()
    if parses:
        ast.parse(source)
    else:
        with pytest.raises(SyntaxError):
            ast.parse(source)


@pytest.mark.parametrize("code", sorted(classes("run", "tool")))
def test_examples_are_sequences_of_programs(code):
    cls = classes("run", "tool")[code]
    for kind in ("INVALID", "VALID"):
        examples = getattr(cls, kind)
        assert isinstance(examples, (tuple, list)), f"{code}.{kind} must be a tuple of programs"


@pytest.mark.parametrize("code", sorted(c for c, cls in classes("run").items() if not getattr(cls, "incident", False)))
def test_a_runtime_check_shows_what_it_reports(code):
    # An incident (an interrupt, the CUDA emulation, a rank killed) is what happened to the run,
    # not something a script does, so it may have no example; a check always shows one.
    cls = classes("run")[code]
    assert cls.INVALID, f"{code} has no INVALID example"
    info = cls.info()
    assert info.bad == textwrap.dedent(cls.INVALID[0]).strip("\n")
    if cls.VALID:
        assert info.good != info.bad, f"{code}: its VALID example is its INVALID one"
