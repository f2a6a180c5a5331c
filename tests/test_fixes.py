"""Every fix, on the rule's own examples and on whole scripts: the fixed file parses, linting it
again reports nothing the fixes addressed, fixing it again changes nothing, and the fixes of
several rules in one file compose (through the real `ddpcheck lint --fix`)."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.fixes import apply_fixes
from ddpcheck.lint.rule import Invalid
from ddpcheck.lint.rules import rule_classes
from tests.conftest import FIXTURES, run_cli

FIXABLE = [r for r in rule_classes() if r.fixable]


def _examples():
    for rule in FIXABLE:
        for i, example in enumerate(rule.INVALID):
            code = example.code if isinstance(example, Invalid) else example
            yield pytest.param(rule, textwrap.dedent(code).lstrip("\n"), id=f"{rule.code}-invalid-{i}")


def _fix_until_stable(source: str, rules, unsafe: bool = True) -> str:
    for _ in range(10):
        new, applied = apply_fixes(source, lint_source("example.py", source, rules), unsafe=unsafe)
        if not applied or new == source:
            return source
        source = new
    raise AssertionError("fixes did not settle in 10 passes")


def test_every_fixable_rule_has_an_example_with_its_fix_pinned():
    for rule in FIXABLE:
        assert any(isinstance(e, Invalid) and e.fixed for e in rule.INVALID), \
            f"{rule.code} is fixable but no INVALID example shows its fix"


@pytest.mark.parametrize("rule,source", list(_examples()))
def test_fix_parses_addresses_its_findings_and_is_idempotent(rule, source):
    findings = lint_source("example.py", source, [rule])
    with_fix = [f for f in findings if f.fix is not None]
    if not with_fix:
        return  # this example has no mechanical remedy
    fixed = _fix_until_stable(source, [rule])
    compile(fixed, "example.py", "exec")
    left = lint_source("example.py", fixed, [rule])
    assert len(left) <= len(findings) - len(with_fix), (
        f"{rule.code}: linting the fixed code still reports {[(f.line, f.message) for f in left]}\n{fixed}")
    assert _fix_until_stable(fixed, [rule]) == fixed, "fixing the fixed code changed it again"


# Several fixable pitfalls of different rules in one script.
COMPOSED = textwrap.dedent(
    """\
    import argparse
    import os

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()


    def main():
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:23456",
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        torch.cuda.set_device(args.local_rank)
        model = torch.nn.parallel.DistributedDataParallel(Net().cuda(), device_ids=[args.local_rank])
        pretrained = torch.load("init.pt")
        model.module.load_state_dict(pretrained)
        sampler = DistributedSampler(train_set) if dist.is_initialized() else None
        loader = DataLoader(train_set, batch_size=64, shuffle=True, sampler=sampler)
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                loss.backward()
            torch.save(model.state_dict(), "checkpoint.pt")


    if __name__ == "__main__":
        main()
    """
)


def test_fixes_of_several_rules_compose_through_the_cli(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(COMPOSED)
    before = run_cli("lint", "--select", "ALL", "--output-format", "json", str(script))
    import json

    fixable = {f["code"] for f in json.loads(before.stdout)["findings"] if f["fix"]}
    assert {"DDP002", "DDP005", "DDP006", "DDP008", "DDP010", "DDP011", "DDP015", "DDP019"} <= fixable, fixable
    run_cli("lint", "--select", "ALL", "--fix", "--unsafe-fixes", str(script))
    fixed = script.read_text()
    compile(fixed, str(script), "exec")
    after = json.loads(run_cli("lint", "--select", "ALL", "--output-format", "json", str(script)).stdout)
    assert not [f for f in after["findings"] if f["fix"]], after["findings"]
    assert not {f["code"] for f in after["findings"]} & {"DDP002", "DDP005", "DDP006", "DDP008", "DDP010", "DDP015"}
    assert "shuffle=(sampler is None)" in fixed and "if sampler is not None:" in fixed
    again = run_cli("lint", "--select", "ALL", "--fix", "--unsafe-fixes", str(script))
    assert script.read_text() == fixed, again.stdout


def _fixture_scripts():
    return sorted(FIXTURES.glob("lint/*.py")) + sorted(FIXTURES.glob("corpus/*.py"))


@pytest.mark.slow
def test_fixes_on_the_fixture_scripts(tmp_path):
    """Every fixture script, fixed with every fix: it parses, nothing fixable is left, and a
    second `--fix` changes nothing."""
    copies = []
    for path in _fixture_scripts():
        copy = tmp_path / path.parent.name / path.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(path, copy)
        copies.append(copy)
    run_cli("lint", "--select", "ALL", "--fix", "--unsafe-fixes", "--no-cache", str(tmp_path))
    import json

    texts = {p: p.read_text() for p in copies}
    for path, text in texts.items():
        compile(text, str(path), "exec")
    report = json.loads(run_cli("lint", "--select", "ALL", "--no-cache", "--output-format", "json", str(tmp_path)).stdout)
    assert not [(f["path"], f["line"], f["code"]) for f in report["findings"] if f["fix"]]
    run_cli("lint", "--select", "ALL", "--fix", "--unsafe-fixes", "--no-cache", str(tmp_path))
    assert {p: p.read_text() for p in copies} == texts
