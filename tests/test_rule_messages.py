"""What users read: the messages each static rule emits on its own INVALID examples name the
problem, then the remedy, Ruff-style; and every rule's name reaches its page."""

from __future__ import annotations

import textwrap

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.rule import Invalid
from ddpcheck.lint.rules import rule_classes
from tests.conftest import run_cli

RULES = rule_classes()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_messages_say_what_is_wrong_then_what_to_do(rule):
    for example in rule.INVALID:
        source = textwrap.dedent(example.code if isinstance(example, Invalid) else example).lstrip("\n")
        for finding in lint_source("example.py", source, [rule]):
            # "<what is wrong>: <why>; <what to do>" — a colon or semicolon before the remedy.
            assert finding.message and (";" in finding.message or ":" in finding.message), finding.message
            assert not finding.message.endswith("."), "one clause list, no final period"


def test_explain_reaches_every_static_rule_by_its_name():
    names = [r.name for r in RULES]
    assert len(set(names)) == len(names), "two static rules share a name: `ddpcheck explain NAME` reaches one"
    for rule in RULES[:: max(1, len(RULES) // 6)]:  # a few, each is a process
        page = run_cli("explain", rule.name)
        assert page.returncode == 0 and page.stdout.startswith(f"# {rule.code} "), page.stderr
