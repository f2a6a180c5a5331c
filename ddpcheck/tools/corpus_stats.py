"""Precision and recall of `ddpcheck lint` over the accuracy corpus (fixtures/corpus/).

    python -m ddpcheck.tools.corpus_stats [--diff] [CORPUS_DIR]

Each corpus line names its pitfalls with marker comments (see fixtures/corpus/README.md):
`# expect: CODE` (reported, real), `# miss: CODE` (real, not reported), `# fp: CODE` (reported,
not real). Every rule present runs, default-off rules included. Markers of codes that no rule
has yet are counted as pending and otherwise ignored.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_MARKER = re.compile(r"#\s*(expect|miss|fp):\s*(DDP\d{3}(?:\s*,\s*DDP\d{3})*)")

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"

Key = tuple[str, int, str]  # (file relative to the corpus, line, code)


@dataclass
class CorpusResult:
    files: int = 0
    expect: set[Key] = field(default_factory=set)
    miss: set[Key] = field(default_factory=set)
    fp: set[Key] = field(default_factory=set)
    found: set[Key] = field(default_factory=set)
    pending: set[Key] = field(default_factory=set)  # markers of codes no rule has yet

    @property
    def unexpected(self) -> set[Key]:
        """Findings without an `expect`/`fp` marker."""
        return self.found - self.expect - self.fp

    @property
    def unfound(self) -> set[Key]:
        """`expect`/`fp` markers without a finding."""
        return (self.expect | self.fp) - self.found

    def figures(self, code: str | None = None) -> tuple[int, int, int, float, float]:
        """(true positives, false positives, false negatives, precision, recall) from the markers."""
        pick = (lambda keys: {k for k in keys if k[2] == code}) if code else (lambda keys: keys)
        tp, fp, fn = len(pick(self.expect)), len(pick(self.fp)), len(pick(self.miss))
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        return tp, fp, fn, precision, recall


def markers(text: str) -> dict[str, set[tuple[int, str]]]:
    found: dict[str, set[tuple[int, str]]] = {"expect": set(), "miss": set(), "fp": set()}
    for number, line in enumerate(text.splitlines(), 1):
        for match in _MARKER.finditer(line):
            for code in re.split(r"\s*,\s*", match.group(2)):
                found[match.group(1)].add((number, code))
    return found


def evaluate(corpus: Path = DEFAULT_CORPUS) -> CorpusResult:
    from ddpcheck.lint.engine import lint_source
    from ddpcheck.lint.model import Project
    from ddpcheck.lint.rules import rule_classes

    rules = list(rule_classes())
    present = {r.code for r in rules}
    facts = Project()  # one per run, as the CLI does
    result = CorpusResult()
    for path in sorted(corpus.rglob("*.py")):
        rel = path.relative_to(corpus).as_posix()
        text = path.read_text(encoding="utf-8")
        result.files += 1
        for kind, entries in markers(text).items():
            for line, code in entries:
                key = (rel, line, code)
                (getattr(result, kind) if code in present else result.pending).add(key)
        for finding in lint_source(str(path.resolve()), text, rules, facts):
            # A finding may sit in another module of the fixture's project (where the fix goes).
            where = Path(finding.path or path).resolve()
            inside = where.relative_to(corpus.resolve()).as_posix() if where.is_relative_to(corpus.resolve()) else rel
            result.found.add((inside, finding.line, finding.code))
    return result


def report(result: CorpusResult) -> str:
    codes = sorted({k[2] for k in result.expect | result.miss | result.fp})
    lines = [f"corpus: {result.files} files, {len(result.expect) + len(result.miss)} real pitfalls marked",
             f"{'code':<8}{'tp':>4}{'fp':>4}{'fn':>4}  precision  recall"]
    for code in codes:
        tp, fp, fn, p, r = result.figures(code)
        lines.append(f"{code:<8}{tp:>4}{fp:>4}{fn:>4}  {p:>9.1%}  {r:>6.1%}")
    tp, fp, fn, p, r = result.figures()
    lines.append(f"{'all':<8}{tp:>4}{fp:>4}{fn:>4}  {p:>9.1%}  {r:>6.1%}")
    if result.pending:
        lines.append(f"pending: {len(result.pending)} markers for codes without a rule yet")
    return "\n".join(lines)


def diff(result: CorpusResult) -> str:
    lines = [f"{f}:{line}: {code} reported but not marked (add `# expect: {code}` or `# fp: {code}`)"
             for f, line, code in sorted(result.unexpected)]
    lines += [f"{f}:{line}: {code} marked but not reported"
              for f, line, code in sorted(result.unfound)]
    return "\n".join(lines) or "findings match the markers"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    show_diff = "--diff" in args
    rest = [a for a in args if a != "--diff"]
    corpus = Path(rest[0]) if rest else DEFAULT_CORPUS
    if not corpus.is_dir():
        print(f"error: corpus folder {corpus} does not exist", file=sys.stderr)
        return 2
    result = evaluate(corpus)
    print(report(result))
    if show_diff:
        print(diff(result))
    return 0 if not (result.unexpected or result.unfound) else 1


if __name__ == "__main__":
    sys.exit(main())
