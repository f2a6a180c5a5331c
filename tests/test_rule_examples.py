"""Every rule's VALID and INVALID examples, collected automatically as tests (Fixit's way)."""

from __future__ import annotations

import textwrap

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.fixes import apply_fixes
from ddpcheck.lint.rule import Invalid
from ddpcheck.lint.rules import rule_classes


def _cases():
    for rule in rule_classes():
        for i, example in enumerate(rule.VALID):
            yield pytest.param(rule, "valid", example, id=f"{rule.code}-valid-{i}")
        for i, example in enumerate(rule.INVALID):
            yield pytest.param(rule, "invalid", example, id=f"{rule.code}-invalid-{i}")


@pytest.mark.parametrize("rule,kind,example", list(_cases()))
def test_rule_example(rule, kind, example):
    if kind == "valid":
        source = textwrap.dedent(example).lstrip("\n")
        findings = [f for f in lint_source("example.py", source, [rule]) if f.code == rule.code]
        assert findings == [], f"{rule.code} fired on a valid example:\n{source}\n{findings}"
        return
    # Fixit's contract: an INVALID example states exactly where it is reported.
    assert isinstance(example, Invalid), f"{rule.code}: INVALID examples are Invalid(code, lines=...)"
    invalid = example
    source = textwrap.dedent(invalid.code).lstrip("\n")
    findings = [f for f in lint_source("example.py", source, [rule]) if f.code == rule.code]
    assert findings, f"{rule.code} missed an invalid example:\n{source}"
    assert sorted(f.line for f in findings) == sorted(invalid.lines), (
        f"{rule.code} reported lines {sorted(f.line for f in findings)}, the example pins "
        f"{sorted(invalid.lines)}:\n{source}")
    if invalid.fixed is not None:
        fixed, applied = apply_fixes(source, findings, unsafe=True)
        assert applied, f"{rule.code} offered no fix"
        assert fixed == textwrap.dedent(invalid.fixed).lstrip("\n")


def test_every_rule_has_examples():
    for rule in rule_classes():
        assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"
