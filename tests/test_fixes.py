"""Every fix, on the rule's own examples and on whole scripts: the fixed file parses, linting it
again reports nothing the fixes addressed, fixing it again changes nothing, and the fixes of
several rules in one file compose (through the real `ddpcheck lint --fix`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.fixes import apply_fixes
from ddpcheck.lint.rule import Invalid
from ddpcheck.lint.rules import rule_classes
from ddpcheck.tool_codes import TOOL_CODES
from tests.conftest import FIXTURES
from tests.helpers import run_lint

FIXABLE = [r for r in rule_classes() if r.fixable]
# Every code whose finding can carry a fix: the rules' and the tool codes' (DDP901).
FIXABLE_CODES = {r.code for r in FIXABLE} | {t.code for t in TOOL_CODES if t.fixable}


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
    assert not [f for f in left if f.fix is not None], f"{rule.code}: a fixable finding is left\n{fixed}"
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


# More fixable pitfalls of other rules in one script: module-level mp.spawn, reentrant
# checkpointing under find_unused_parameters, the state dict of a compiled model, a noqa that
# suppresses nothing; DDP027 (no fix) stays.
COMPOSED_2 = textwrap.dedent(
    """\
    import os

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.checkpoint import checkpoint


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(4)])

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x)
            return x


    def worker(rank, world_size):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # noqa: DDP003
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = torch.compile(DDP(Net(), find_unused_parameters=True))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * world_size)
        for step in range(10):
            loss = model(torch.randn(4, 8)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            torch.save(model.state_dict(), "ckpt.pt")
        dist.destroy_process_group()


    mp.spawn(worker, args=(2,), nprocs=2)
    """
)

COMPOSITIONS = {
    "sampler-launch-save": (COMPOSED, {"DDP002", "DDP005", "DDP006", "DDP008", "DDP010", "DDP011", "DDP015",
                                       "DDP019"}),
    "spawn-checkpoint-compile-noqa": (COMPOSED_2, {"DDP017", "DDP023", "DDP024", "DDP901"}),
}


def _codes(report: str, fixable: bool | None = None) -> set[str]:
    return {f["code"] for f in json.loads(report)["findings"] if fixable is None or bool(f["fix"]) == fixable}


def test_the_compositions_cover_every_fix():
    covered = set().union(*(codes for _, codes in COMPOSITIONS.values()))
    assert covered == FIXABLE_CODES, f"no composed script has a finding of {sorted(FIXABLE_CODES - covered)}"


@pytest.mark.parametrize("name", list(COMPOSITIONS))
def test_fixes_of_several_rules_compose_through_the_cli(tmp_path, name):
    source, expected = COMPOSITIONS[name]
    script = tmp_path / "train.py"
    script.write_text(source)
    lint = ("--select", "ALL", "--no-cache")
    before = run_lint(*lint, "--output-format", "json", str(script)).stdout
    assert expected <= _codes(before, fixable=True), _codes(before, fixable=True)
    unfixable = _codes(before, fixable=False)
    run_lint(*lint, "--fix", "--unsafe-fixes", str(script))
    fixed = script.read_text()
    compile(fixed, str(script), "exec")
    after = run_lint(*lint, "--output-format", "json", str(script)).stdout
    assert not _codes(after, fixable=True), after
    assert not _codes(after) & expected, after
    assert _codes(after) == unfixable - expected, "the fixes removed or added findings they do not address"
    if name == "sampler-launch-save":
        assert "shuffle=(sampler is None)" in fixed and "if sampler is not None:" in fixed
    again = run_lint(*lint, "--fix", "--unsafe-fixes", str(script))
    assert script.read_text() == fixed, again.stdout


# A sampler chosen by a flag, named and inline; shuffle=True with it and no set_epoch.
CONDITIONAL_SAMPLERS = textwrap.dedent(
    """\
    import json

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def named(distributed, epochs=3):
        dataset = TensorDataset(torch.arange(32.0))
        sampler = DistributedSampler(dataset) if distributed else None
        loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)
        orders = []
        for epoch in range(epochs):
            order = []
            for (x,) in loader:
                order += x.tolist()
            orders.append(order)
        return loader, orders


    def inline(distributed, epochs=3):
        dataset = TensorDataset(torch.arange(32.0))
        loader = DataLoader(dataset, batch_size=8, shuffle=True,
                            sampler=DistributedSampler(dataset) if distributed else None)
        orders = []
        for epoch in range(epochs):
            order = []
            for (x,) in loader:
                order += x.tolist()
            orders.append(order)
        return loader, orders


    def main():
        report = {}
        for train in (named, inline):
            single_loader, single = train(distributed=False)
            dist.init_process_group("gloo", init_method="env://")
            multi_loader, multi = train(distributed=True)
            dist.destroy_process_group()
            report[train.__name__] = {
                "single": type(single_loader.sampler).__name__, "single_reshuffles": single[0] != single[1],
                "multi": type(multi_loader.sampler).__name__, "multi_epoch": multi_loader.sampler.epoch,
                "multi_reshuffles": multi[0] != multi[1],
            }
        print(json.dumps(report))


    if __name__ == "__main__":
        main()
    """
)


def test_fixed_conditional_sampler_trains_right_on_both_paths(tmp_path):
    """DDP006 and DDP002 fixed where the DistributedSampler exists only when distributed: the
    fixed script, run for real, shuffles every epoch without DDP (a RandomSampler) and with it
    (a DistributedSampler whose epoch advances) — and neither path raises."""
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(CONDITIONAL_SAMPLERS)
    before = run_lint("--no-cache", "--output-format", "json", str(script)).stdout
    assert [f["code"] for f in json.loads(before)["findings"]] == ["DDP006", "DDP002", "DDP006", "DDP002"]
    run_lint("--no-cache", "--fix", "--unsafe-fixes", str(script))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    paths = {"single": "RandomSampler", "single_reshuffles": True, "multi": "DistributedSampler",
             "multi_epoch": 2, "multi_reshuffles": True}
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == {"named": paths, "inline": paths}


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
    run_lint("--select", "ALL", "--fix", "--unsafe-fixes", "--no-cache", str(tmp_path))
    texts = {p: p.read_text() for p in copies}
    for path, text in texts.items():
        compile(text, str(path), "exec")
    report = json.loads(run_lint("--select", "ALL", "--no-cache", "--output-format", "json", str(tmp_path)).stdout)
    assert not [(f["path"], f["line"], f["code"]) for f in report["findings"] if f["fix"]]
    run_lint("--select", "ALL", "--fix", "--unsafe-fixes", "--no-cache", str(tmp_path))
    assert {p: p.read_text() for p in copies} == texts
