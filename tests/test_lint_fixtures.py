"""The lint rules on whole training scripts (fixtures/lint/), good and bad.

Each fixture marks the lines that must be reported with a trailing `# expect: CODE[, CODE]`
comment; a test asserts that the exact set of (code, line) pairs is reported — no more, no less —
and a marker naming a code that does not exist fails instead of being skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpcheck.findings import Applicability
from ddpcheck.lint.engine import lint_source
from ddpcheck.lint.fixes import apply_fixes
from ddpcheck.lint.rules import rule_classes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>DDP\d{3}(?:\s*,\s*DDP\d{3})*)")
ALL_RULES = rule_classes()
DEFAULT_RULES = tuple(r for r in ALL_RULES if r.default_enabled)
KNOWN_CODES = {r.code for r in ALL_RULES}


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.py"))


def expected(path: Path) -> set[tuple[str, int]]:
    pairs = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            pairs |= {(code.strip(), number) for code in match["codes"].split(",")}
    return pairs


def reported(path: Path, rules=ALL_RULES) -> set[tuple[str, int]]:
    return {(f.code, f.line) for f in lint_source(str(path), path.read_text(), rules)}


def test_fixture_set_is_there():
    names = {p.name for p in _fixtures()}
    assert {"tutorial_ddp.py", "good_ddp.py"} <= names
    assert len(names) >= 6


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_fixture_reports_exactly_its_expectations(path):
    want = expected(path)
    unknown = sorted(code for code, _ in want if code not in KNOWN_CODES)
    assert not unknown, f"{path.name}: `# expect:` names codes that no rule has: {unknown}"
    got = reported(path)
    assert got == want, f"{path.name}: missing {sorted(want - got)}, unexpected {sorted(got - want)}"


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.name)
def test_fixture_is_valid_python(path):
    compile(path.read_text(), str(path), "exec")


def test_tutorial_reports_set_epoch_unscaled_lr_and_old_launcher_only():
    path = FIXTURES / "tutorial_ddp.py"
    # With the rules a user gets by default, exactly the three known mistakes, at their lines.
    assert reported(path, DEFAULT_RULES) == {("DDP004", 34), ("DDP002", 44), ("DDP008", 60)}


@pytest.mark.parametrize("name", ["good_ddp.py", "good_research_style.py", "good_nanogpt_style.py"])
def test_correct_scripts_report_nothing(name):
    assert reported(FIXTURES / name) == set()


def test_set_epoch_fix_on_the_tutorial():
    path = FIXTURES / "tutorial_ddp.py"
    source = path.read_text()
    findings = [f for f in lint_source(str(path), source, ALL_RULES) if f.code == "DDP002"]
    assert findings[0].fix.applicability is Applicability.UNSAFE
    fixed, applied = apply_fixes(source, findings, unsafe=True)
    assert applied
    assert "    for epoch in range(2):  # expect: DDP002\n        sampler.set_epoch(epoch)\n        for batch in loader:\n" in fixed
    assert "DDP002" not in {f.code for f in lint_source(str(path), fixed, ALL_RULES)}
    assert apply_fixes(source, findings, unsafe=False)[0] == source  # unsafe fixes need opting in


# One mistake at a time, put into the correct script: each is found, and nothing else is.
_MUTATIONS = {
    "DDP001": ("sampler=train_sampler,\n", "shuffle=True,\n"),
    "DDP002": ("            train_sampler.set_epoch(epoch)\n", ""),
    "DDP003": ("    torch.cuda.set_device(local_rank)\n", ""),
    "DDP004": ("lr=lr, momentum", "lr=0.1, momentum"),
    "DDP005": ("        dist.destroy_process_group()\n", "        pass\n"),
    "DDP006": ("sampler=train_sampler,\n", "sampler=train_sampler, shuffle=True,\n"),
    "DDP007": ("device_ids=[local_rank]", "device_ids=[rank]"),
    "DDP008": (
        '    local_rank = int(os.environ["LOCAL_RANK"])\n',
        '    local_rank = args.local_rank\n',
        '    parser.add_argument("--out", default="checkpoint.pt")\n',
        '    parser.add_argument("--out", default="checkpoint.pt")\n'
        '    parser.add_argument("--local_rank", type=int, default=0)\n',
    ),
    "DDP009": (
        "            accuracy = evaluate(model, val_loader, device)\n",
        "            accuracy = 0.0\n            if rank == 0:\n"
        "                accuracy = evaluate(model, val_loader, device)\n",
    ),
    "DDP010": (  # the save moves out of the rank-0 branch (the print stays in)
        '                print(f"epoch {epoch}: accuracy {accuracy:.3f}")\n                torch.save(',
        '                print(f"epoch {epoch}: accuracy {accuracy:.3f}")\n            torch.save(',
    ),
    "DDP011": ("torch.load(args.resume, map_location=device)", "torch.load(args.resume)"),
    "DDP012": ("    if args.sync_bn:\n        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n", ""),
}


@pytest.mark.parametrize("code", sorted(_MUTATIONS))
def test_each_single_mistake_in_the_good_script_is_found(code):
    source = (FIXTURES / "good_ddp.py").read_text()
    edits = _MUTATIONS[code]
    for old, new in zip(edits[::2], edits[1::2]):
        assert old in source, f"mutation for {code} no longer applies"
        source = source.replace(old, new, 1)
    codes = {f.code for f in lint_source("good_ddp.py", source, ALL_RULES)}
    assert codes == {code}
