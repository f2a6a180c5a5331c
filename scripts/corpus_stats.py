"""Precision and recall of `ddpcheck lint` over hand-marked scripts, from ddpcheck's findings.

    python scripts/corpus_stats.py [--diff] [DIR ...]     # default: fixtures/corpus
    python scripts/corpus_stats.py --readme               # write the figures into docs/accuracy.md

Each line with a pitfall carries a marker comment (fixtures/corpus/README.md): `# expect: CODE`
(a real pitfall ddpcheck reports), `# miss: CODE` (real, not reported), `# fp: CODE` (reported,
not real). The markers say what is real; the figures count what `ddpcheck lint` (run once, as a
user would, every static rule on) actually reports: a finding on a real pitfall is a true
positive, any other finding a false positive, a real pitfall without a finding a false negative.
`--diff` lists where the findings and the markers disagree. A script of the repository, not
shipped in the wheel.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "fixtures" / "corpus"
MARKER = re.compile(r"#\s*(expect|miss|fp):\s*(DDP\d{3}(?:\s*,\s*DDP\d{3})*)")

Key = tuple[str, int, str]  # (path relative to the repository, line, code)


def markers(paths: list[Path]) -> dict[str, set[Key]]:
    found: dict[str, set[Key]] = {"expect": set(), "miss": set(), "fp": set()}
    for path in paths:
        rel = path.resolve().relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in MARKER.finditer(line):
                for code in re.split(r"\s*,\s*", match.group(2)):
                    found[match.group(1)].add((rel, number, code))
    return found


def findings(dirs: list[Path]) -> set[Key]:
    """What `ddpcheck lint` reports on the folders: every static rule, no cache."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-m", "ddpcheck", "lint", "--no-cache", "--exit-zero",
                          "--select", "DDP0,DDP900", "--output-format", "json", *map(str, dirs)],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"ddpcheck lint failed ({out.returncode}): {out.stderr.strip()}")
    reported: set[Key] = set()
    for f in json.loads(out.stdout)["findings"]:
        path = Path(f["path"])
        path = path if path.is_absolute() else ROOT / path
        reported.add((path.resolve().relative_to(ROOT).as_posix(), f["location"]["line"], f["code"]))
    return reported


def figures(found: set[Key], real: set[Key], code: str | None = None) -> tuple[int, int, int, float, float]:
    """(true positives, false positives, false negatives, precision, recall)."""
    if code is not None:
        found = {k for k in found if k[2] == code}
        real = {k for k in real if k[2] == code}
    tp, fp, fn = len(found & real), len(found - real), len(real - found)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return tp, fp, fn, precision, recall


def table(files: int, found: set[Key], real: set[Key]) -> str:
    lines = [f"corpus: {files} files, {len(real)} real pitfalls marked",
             f"{'code':<8}{'tp':>4}{'fp':>4}{'fn':>4}  precision  recall"]
    for code in sorted({k[2] for k in found | real}):
        tp, fp, fn, p, r = figures(found, real, code)
        lines.append(f"{code:<8}{tp:>4}{fp:>4}{fn:>4}  {p:>9.1%}  {r:>6.1%}")
    tp, fp, fn, p, r = figures(found, real)
    lines.append(f"{'all':<8}{tp:>4}{fp:>4}{fn:>4}  {p:>9.1%}  {r:>6.1%}")
    return "\n".join(lines)


README = ROOT / "docs" / "accuracy.md"


def write_readme(text: str) -> None:
    """Replace the corpus figures in docs/accuracy.md (the block that starts with `corpus: `)."""
    readme = README.read_text(encoding="utf-8")
    start = readme.index("\ncorpus: ") + 1
    end = readme.index("\n", readme.index("\nall ", start) + 1)
    README.write_text(readme[:start] + text + readme[end:], encoding="utf-8")


def main(argv: list[str]) -> int:
    show_diff = "--diff" in argv
    readme = "--readme" in argv
    dirs = [Path(a) for a in argv if a not in ("--diff", "--readme")] or [DEFAULT]
    for d in dirs:
        if not d.is_dir():
            print(f"error: {d} is not a folder", file=sys.stderr)
            return 2
    paths = sorted(p for d in dirs for p in d.rglob("*.py"))
    marked = markers(paths)
    found = findings(dirs)
    real = marked["expect"] | marked["miss"]
    figures_table = table(len(paths), found, real)
    print(figures_table)
    if readme:
        write_readme(figures_table)
    disagree = sorted((found - marked["expect"] - marked["fp"]) | ((marked["expect"] | marked["fp"]) - found))
    if show_diff:
        for path, line, code in disagree:
            what = "reported but not marked" if (path, line, code) in found else "marked but not reported"
            print(f"{path}:{line}: {code} {what}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
