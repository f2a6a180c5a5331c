"""Every static rule documents itself the same way: its page is its docstring."""

from __future__ import annotations

import re
import textwrap

import pytest

from ddpcheck.catalog import render_page
from ddpcheck.findings import Severity
from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.rule import Invalid
from ddpcheck.lint.rules import rule_classes

RULES = rule_classes()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_page_has_its_sections(rule):
    info = rule.info()
    assert re.fullmatch(r"DDP0\d\d", info.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", info.name)
    assert info.summary and len(info.summary) <= 160, info.summary
    body = info.body
    sections = re.findall(r"^## (.+)$", body, flags=re.M)
    assert sections == ["Why it matters", "How to fix", "References"], sections
    references = body.split("## References", 1)[1]
    assert re.search(r"^- https://", references, flags=re.M), "references need real links"
    assert info.bad and info.good, "the first INVALID/VALID examples make the page's bad/good pair"
    page = render_page(info)
    assert page.startswith(f"# {info.code} `{info.name}`")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_messages_say_what_to_do(rule):
    # What users read: the messages the rule emits on its own INVALID examples name the problem,
    # then the remedy after a colon or semicolon.
    assert isinstance(rule.severity, Severity)
    for example in rule.INVALID:
        source = textwrap.dedent(example.code if isinstance(example, Invalid) else example).lstrip("\n")
        for finding in lint_source("example.py", source, [rule]):
            assert finding.message and (";" in finding.message or ":" in finding.message), finding.message
            assert not finding.message.endswith("."), "messages are one clause list, Ruff-style, no final period"


def test_codes_and_names_are_unique():
    assert len({r.code for r in RULES}) == len(RULES)
    assert len({r.name for r in RULES}) == len(RULES)
