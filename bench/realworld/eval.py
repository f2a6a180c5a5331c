"""Score `ddpcheck lint` against hand-labelled public DDP scripts (the real-world yardstick).

    python bench/realworld/eval.py MIRRORS.json [--labels FILE ...] [--code X] [--json]

MIRRORS.json maps "owner/name" to a local git directory of that repository. Each labelled script
is exported at its labelled commit (every Python file of the repository, plus its packaging files)
into a temporary tree, linted from the tree's root as a user would, and its findings are scored
against the labels. The labelling rules and the scoring are described in README.md beside this
file. Nothing here touches the network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
DEFAULT_LABELS = HERE / "labels.json"
CODES = tuple(f"DDP{n:03d}" for n in range(1, 37))
# print-on-every-rank: reported in its own row, kept out of the headline total.
SEPARATE = frozenset({"DDP020"})
# The rules added after the first yardstick (DDP023 on) get their own total, so that the headline
# stays comparable with the figures measured before they were labelled.
NEWER = frozenset(f"DDP{n:03d}" for n in range(23, 37))
STATUSES = ("PRESENT", "ABSENT", "N/A")
NEAR = 2
EXPORT_SUFFIXES = (".py", ".pyi")
EXPORT_NAMES = ("pyproject.toml", "setup.cfg")
HEX40 = re.compile(r"^[0-9a-f]{40}$")
# One script's lint, wall clock: far above any real script's (seconds), even on a loaded machine.
LINT_TIMEOUT_S = 600


class LabelError(ValueError):
    """A labels file that does not follow the schema in README.md."""


@dataclass(frozen=True)
class Location:
    path: str
    line: int


@dataclass(frozen=True)
class Instance:
    """One labelled occurrence of a pitfall: its line and the other lines that also locate it."""

    locations: tuple[Location, ...]

    @property
    def main(self) -> Location:
        return self.locations[0]


@dataclass(frozen=True)
class Label:
    status: str
    instances: tuple[Instance, ...]
    reason: str


@dataclass(frozen=True)
class Entry:
    repo: str
    commit: str
    path: str
    helpers: tuple[str, ...]
    kind: str
    labels: dict[str, Label]
    source: str
    prefix_fix: dict[str, str] | None = None

    @property
    def name(self) -> str:
        return f"{self.repo}:{self.path}"


@dataclass(frozen=True)
class Finding:
    code: str
    path: str
    line: int


@dataclass
class Outcome:
    """How one finding or one instance was judged."""

    verdict: str  # TP (located), TP-unlocated, FN, FP, duplicate, ignored, helper-unscored
    code: str
    path: str
    line: int
    note: str = ""


@dataclass
class ScriptResult:
    entry: Entry
    outcomes: list[Outcome] = field(default_factory=list)
    error: str = ""


# ---------------------------------------------------------------------------------------------
# Labels


def _location(raw: Any, where: str, allowed: set[str]) -> Location:
    if not isinstance(raw, dict) or not isinstance(raw.get("path"), str) \
            or not isinstance(raw.get("line"), int) or raw["line"] < 1:
        raise LabelError(f"{where}: a location needs a path and a line >= 1")
    if raw["path"] not in allowed:
        raise LabelError(f"{where}: {raw['path']} is neither the script nor one of its helpers")
    return Location(raw["path"], raw["line"])


def _entry(raw: Any, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise LabelError(f"{where}: an entry must be an object")
    for key in ("repo", "commit", "path", "kind"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise LabelError(f"{where}: missing or empty {key!r}")
    if not HEX40.match(raw["commit"]):
        raise LabelError(f"{where}: commit must be 40 lower-case hex digits")
    helpers = raw.get("helpers", [])
    if not isinstance(helpers, list) or not all(isinstance(h, str) for h in helpers):
        raise LabelError(f"{where}: helpers must be a list of paths")
    scripts = [h for h in helpers if not h.endswith(EXPORT_SUFFIXES)]
    if scripts:
        # Helpers are linted with the script; launch scripts and configs are named in reasons.
        raise LabelError(f"{where}: helpers must be Python modules, not {', '.join(scripts)}")
    allowed = {raw["path"], *helpers}
    fix = raw.get("prefix_fix")
    if fix is not None and not (isinstance(fix, dict) and fix.get("thread") and fix.get("change")):
        raise LabelError(f"{where}: prefix_fix must be null or have thread and change")
    labels_raw = raw.get("labels")
    if not isinstance(labels_raw, dict):
        raise LabelError(f"{where}: labels must be an object of code -> label")
    labels: dict[str, Label] = {}
    for code, lab in labels_raw.items():
        at = f"{where} {code}"
        if code not in CODES:
            raise LabelError(f"{at}: unknown code (labels cover {CODES[0]}-{CODES[-1]})")
        if not isinstance(lab, dict) or lab.get("status") not in STATUSES:
            raise LabelError(f"{at}: status must be one of {', '.join(STATUSES)}")
        if not isinstance(lab.get("reason"), str) or not lab["reason"].strip():
            raise LabelError(f"{at}: a one-line reason is required")
        instances = []
        for i, line in enumerate(lab.get("lines", [])):
            also = line.get("also", []) if isinstance(line, dict) else []
            locs = [_location(line, f"{at} line {i}", allowed)]
            locs += [_location(a, f"{at} line {i} also", allowed) for a in also]
            instances.append(Instance(tuple(locs)))
        if (lab["status"] == "PRESENT") != bool(instances):
            raise LabelError(f"{at}: lines are given exactly when the status is PRESENT")
        labels[code] = Label(lab["status"], tuple(instances), lab["reason"])
    return Entry(raw["repo"], raw["commit"], raw["path"], tuple(helpers), raw["kind"], labels, where, fix)


def load_labels(files: Sequence[Path]) -> tuple[list[Entry], list[str]]:
    """Every entry of the files, and one warning line per code an entry leaves unlabelled."""
    entries: list[Entry] = []
    warnings: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LabelError(f"{file}: cannot read labels: {exc}") from exc
        if not isinstance(data, list):
            raise LabelError(f"{file}: the labels file must hold a JSON list of entries")
        for i, raw in enumerate(data):
            entry = _entry(raw, f"{file.name}[{i}]")
            key = (entry.repo, entry.commit, entry.path)
            if key in seen:
                raise LabelError(f"{entry.source}: {entry.name} at {entry.commit[:10]} is labelled twice")
            seen.add(key)
            missing = [c for c in CODES if c not in entry.labels]
            if missing:
                warnings.append(f"{entry.source} {entry.name}: not labelled: {', '.join(missing)}")
            entries.append(entry)
    return entries, warnings


# ---------------------------------------------------------------------------------------------
# Export and lint


def _git(git_dir: str, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(["git", "--git-dir", git_dir, *args], input=data,
                          capture_output=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"git {args[0]}: {lines[-1] if lines else 'failed'}")
    return done.stdout


def export_tree(git_dir: str, commit: str, dest: Path) -> int:
    """Write the repository's Python and packaging files at `commit` under `dest`; count them."""
    listing = _git(git_dir, "ls-tree", "-r", "-z", commit)
    blobs: list[tuple[str, str]] = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = name.decode("utf-8", errors="surrogateescape")
        base = path.rsplit("/", 1)[-1]
        if kind == "blob" and mode != "120000" and (path.endswith(EXPORT_SUFFIXES) or base in EXPORT_NAMES):
            blobs.append((sha, path))
    out = _git(git_dir, "cat-file", "--batch", data="".join(f"{sha}\n" for sha, _ in blobs).encode())
    pos = 0
    written = 0
    for _, path in blobs:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        if len(header) < 3:  # "<sha> missing": a snapshot without that blob (too large to store)
            pos = header_end + 1
            continue
        size = int(header[2])
        body = out[header_end + 1: header_end + 1 + size]
        pos = header_end + 1 + size + 1
        written += 1
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    (dest / ".git").mkdir(exist_ok=True)  # the root marker a clone has
    return written


def lint(tree: Path, paths: Sequence[str]) -> list[Finding]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "ddpcheck", "lint", "--output-format", "json", "--select", "ALL",
           "--no-cache", "--exit-zero", *paths]
    try:
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env, check=False,
                              timeout=LINT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # A lint that never finishes is a failure on that script, as a user would meet it.
        raise RuntimeError(f"ddpcheck lint did not finish within {LINT_TIMEOUT_S} s") from None
    try:
        report = json.loads(done.stdout)
    except ValueError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"ddpcheck lint exited {done.returncode}: {tail}") from None
    # A file ddpcheck could not check (an internal error) would otherwise look like a script
    # with nothing to find: every label of it would count as a miss, silently.
    errors = report.get("errors") or []
    if errors:
        first = errors[0]
        raise RuntimeError(f"ddpcheck could not check {first.get('path')}: {first.get('message')}")
    findings = []
    for f in report.get("findings", []):
        path = Path(f["path"])
        rel = path.relative_to(tree) if path.is_absolute() and path.is_relative_to(tree) else path
        findings.append(Finding(f["code"], rel.as_posix(), int(f["location"]["line"])))
    return findings


# ---------------------------------------------------------------------------------------------
# Scoring


def _distance(finding: Finding, instance: Instance) -> int | None:
    gaps = [abs(finding.line - loc.line) for loc in instance.locations if loc.path == finding.path]
    best = min(gaps, default=None)
    return best if best is not None and best <= NEAR else None


def _near_another_location(finding: Finding, instance: Instance, found: Finding) -> bool:
    """`finding` is within reach of one of the instance's locations that `found` (the finding
    that located it) is not near: the label names both places for one pitfall."""
    for loc in instance.locations:
        if loc.path != finding.path or abs(finding.line - loc.line) > NEAR:
            continue
        if not (loc.path == found.path and abs(found.line - loc.line) <= NEAR):
            return True
    return False


def score_entry(entry: Entry, findings: Iterable[Finding], codes: Sequence[str] = CODES) -> list[Outcome]:
    """Judge every finding and every labelled instance of one script (rules in README.md)."""
    outcomes: list[Outcome] = []
    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    for code in sorted(set(by_code) | {c for c, lab in entry.labels.items() if lab.status == "PRESENT"}):
        if code not in codes:
            continue
        found = sorted(by_code.get(code, []), key=lambda f: (f.path, f.line))
        label = entry.labels.get(code)
        in_script = [f for f in found if f.path == entry.path]
        status = label.status if label else None
        helper_paths = {loc.path for inst in label.instances for loc in inst.locations} if label else set()
        scorable_helper = [f for f in found if f.path != entry.path and f.path in helper_paths]
        unscored = [f for f in found if f.path != entry.path and f.path not in helper_paths]
        for f in unscored:
            outcomes.append(Outcome("helper-unscored", code, f.path, f.line))
        if status is None or status == "N/A":
            why = "not labelled" if status is None else "labelled N/A"
            outcomes += [Outcome("ignored", code, f.path, f.line, why) for f in in_script + scorable_helper]
            continue
        if status == "ABSENT":
            outcomes += [Outcome("FP", code, f.path, f.line, label.reason) for f in in_script]
            outcomes += [Outcome("helper-unscored", code, f.path, f.line) for f in scorable_helper]
            continue
        candidates = in_script + scorable_helper
        pairs = sorted(
            (d, fi, ii)
            for fi, f in enumerate(candidates)
            for ii, inst in enumerate(label.instances)
            if (d := _distance(f, inst)) is not None
        )
        used_f: set[int] = set()
        used_i: set[int] = set()
        matched: dict[int, Finding] = {}
        for _, fi, ii in pairs:
            if fi in used_f or ii in used_i:
                continue
            used_f.add(fi)
            used_i.add(ii)
            f = candidates[fi]
            matched[ii] = f
            outcomes.append(Outcome("TP", code, f.path, f.line))
        left_i = [ii for ii in range(len(label.instances)) if ii not in used_i]
        for fi, f in enumerate(candidates):
            if fi in used_f:
                continue
            if f.path != entry.path:
                outcomes.append(Outcome("helper-unscored", code, f.path, f.line))
            elif left_i:
                inst = label.instances[left_i.pop(0)]
                outcomes.append(Outcome("TP-unlocated", code, f.path, f.line,
                                        f"labelled at {inst.main.path}:{inst.main.line}"))
            elif any(_near_another_location(f, label.instances[ii], matched[ii]) for ii in used_i):
                # Another place the label names for an instance already found: the same pitfall
                # reported there too, not a false claim.
                outcomes.append(Outcome("duplicate", code, f.path, f.line, "at a location of an instance already found"))
            else:
                outcomes.append(Outcome("FP", code, f.path, f.line, "more findings than labelled instances"))
        for ii in left_i:
            loc = label.instances[ii].main
            outcomes.append(Outcome("FN", code, loc.path, loc.line, label.reason))
    return outcomes


@dataclass
class Tally:
    tp: int = 0
    located: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Tally) -> None:
        self.tp += other.tp
        self.located += other.located
        self.fp += other.fp
        self.fn += other.fn

    def as_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "located": self.located,
                "precision": _ratio(self.tp, self.tp + self.fp),
                "recall": _ratio(self.tp, self.tp + self.fn),
                "location_accuracy": _ratio(self.located, self.tp)}


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def tally(results: Sequence[ScriptResult], codes: Sequence[str]) -> dict[str, Tally]:
    table = {code: Tally() for code in codes}
    for result in results:
        for o in result.outcomes:
            t = table.get(o.code)
            if t is None:
                continue
            if o.verdict in ("TP", "TP-unlocated"):
                t.tp += 1
                t.located += o.verdict == "TP"
            elif o.verdict == "FP":
                t.fp += 1
            elif o.verdict == "FN":
                t.fn += 1
    return table


# ---------------------------------------------------------------------------------------------
# Driver


def evaluate(entry: Entry, mirrors: dict[str, str], codes: Sequence[str]) -> ScriptResult:
    result = ScriptResult(entry)
    git_dir = mirrors.get(entry.repo)
    if git_dir is None:
        result.error = "no mirror"
        return result
    with tempfile.TemporaryDirectory(prefix="ddp-yardstick-") as tmp:
        tree = Path(tmp)
        try:
            export_tree(git_dir, entry.commit, tree)
            missing = [p for p in (entry.path, *entry.helpers) if not (tree / p).is_file()]
            if missing:
                raise RuntimeError(f"not in the commit: {', '.join(missing)}")
            findings = lint(tree, [entry.path, *entry.helpers])
        except (RuntimeError, OSError) as exc:
            result.error = str(exc)
            findings = []
    if any(f.code == "DDP900" for f in findings):
        result.error = "DDP900: ddpcheck could not parse a file"
    # A lint that failed found nothing: every PRESENT instance then counts as a miss.
    result.outcomes = score_entry(entry, findings, codes)
    return result


def _ddpcheck_commit() -> str:
    try:
        done = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return done.stdout.strip()[:12] or "unknown"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _row(name: str, t: Tally) -> str:
    d = t.as_dict()
    return (f"{name:<9}{t.tp:>5}{t.fp:>5}{t.fn:>5}{_pct(d['precision']):>11}{_pct(d['recall']):>9}"
            f"{_pct(d['location_accuracy']):>10}")


def _summary(results: Sequence[ScriptResult], codes: Sequence[str]
             ) -> tuple[dict[str, Tally], Tally, Tally, list[ScriptResult]]:
    """Per-code tallies, the headline (DDP001-DDP022 but the separate ones), the newer rules' total,
    the scripts linted."""
    table = tally(results, codes)
    headline = Tally()
    newer = Tally()
    for code, t in table.items():
        if code in NEWER:
            newer.add(t)
        elif code not in SEPARATE:
            headline.add(t)
    return table, headline, newer, [r for r in results if r.error != "no mirror"]


def render_text(results: Sequence[ScriptResult], codes: Sequence[str], skipped: Sequence[str]) -> str:
    table, headline, newer, evaluated = _summary(results, codes)
    repos = {r.entry.repo for r in evaluated}
    lines = [f"ddpcheck {_ddpcheck_commit()}, {date.today().isoformat()}: "
             f"{len(evaluated)} scripts from {len(repos)} repositories"]
    lines += [f"skipped (no mirror): {s}" for s in skipped]
    lines.append("")
    lines.append(f"{'code':<9}{'tp':>5}{'fp':>5}{'fn':>5}{'precision':>11}{'recall':>9}{'located':>10}")
    for code in codes:
        t = table[code]
        if t.tp or t.fp or t.fn:
            lines.append(_row(code, t) + ("   (separate)" if code in SEPARATE else ""))
    lines.append(_row("headline", headline) + f"   ({CODES[0]}-DDP022 but " + ", ".join(sorted(SEPARATE)) + ")")
    lines.append(_row("newer", newer) + f"   ({min(NEWER)}-{max(NEWER)})")
    lines.append("")
    lines.append("misses (FN), false positives (FP), findings away from the labelled line (TP-unlocated):")
    for r in evaluated:
        shown = [o for o in r.outcomes if o.verdict in ("FN", "FP", "TP-unlocated")]
        if r.error:
            lines.append(f"  {r.entry.repo} {r.entry.path} @ {r.entry.commit[:10]}: ERROR {r.error}")
        for o in sorted(shown, key=lambda o: (o.verdict, o.code, o.path, o.line)):
            lines.append(f"  {r.entry.repo:<34} {o.path}:{o.line:<5} {o.code} {o.verdict:<13} {o.note}")
    unscored = sum(o.verdict == "helper-unscored" for r in evaluated for o in r.outcomes)
    ignored = sum(o.verdict == "ignored" for r in evaluated for o in r.outcomes)
    twice = sum(o.verdict == "duplicate" for r in evaluated for o in r.outcomes)
    lines.append("")
    lines.append(f"not scored: {ignored} findings of N/A or unlabelled codes, "
                 f"{unscored} findings in helper modules away from labelled lines, "
                 f"{twice} at another labelled location of an instance already found (--json lists them)")
    return "\n".join(lines)


def render_json(results: Sequence[ScriptResult], codes: Sequence[str], skipped: Sequence[str]) -> str:
    table, headline, newer, evaluated = _summary(results, codes)
    return json.dumps({
        "ddpcheck_commit": _ddpcheck_commit(),
        "date": date.today().isoformat(),
        "scripts": len(evaluated),
        "repositories": len({r.entry.repo for r in evaluated}),
        "skipped": list(skipped),
        "codes": {code: t.as_dict() for code, t in table.items()},
        "headline": headline.as_dict(),
        "separate": sorted(SEPARATE),
        "newer": newer.as_dict(),
        "newer_codes": sorted(NEWER),
        "per_script": [
            {"repo": r.entry.repo, "commit": r.entry.commit, "path": r.entry.path, "error": r.error,
             "outcomes": [{"verdict": o.verdict, "code": o.code, "path": o.path, "line": o.line,
                           "note": o.note} for o in r.outcomes]}
            for r in evaluated
        ],
    }, indent=1)


def render_corpus(entries: Sequence[Entry]) -> str:
    """The labelled scripts as a Markdown table: where each comes from and what is PRESENT in it."""
    lines = ["| repository | script | kind | helpers | fixed later | PRESENT |",
             "|---|---|---|---:|---|---|"]
    for e in entries:
        present = ", ".join(c for c in CODES if c in e.labels and e.labels[c].status == "PRESENT")
        fixed = f"[thread]({e.prefix_fix['thread']})" if e.prefix_fix else ""
        lines.append(f"| {e.repo} | `{e.path}` | {e.kind} | {len(e.helpers)} | {fixed} | {present or '—'} |")
    return "\n".join(lines)


def _codes(values: Sequence[str] | None) -> tuple[str, ...]:
    if not values:
        return CODES
    wanted = {c.strip().upper() for v in values for c in v.split(",") if c.strip()}
    unknown = wanted - set(CODES)
    if unknown:
        raise LabelError(f"--code: unknown code(s) {', '.join(sorted(unknown))}")
    return tuple(c for c in CODES if c in wanted)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mirrors", type=Path, nargs="?",
                        help="JSON object: owner/name -> local git directory (not needed for --check/--corpus)")
    parser.add_argument("--labels", type=Path, nargs="+", default=[DEFAULT_LABELS],
                        help="labels files (default: labels.json beside this script)")
    parser.add_argument("--code", action="append", help="score only these codes (repeat or comma-separate)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--jobs", "-j", type=int, default=1, help="scripts linted at once (default 1)")
    parser.add_argument("--check", action="store_true", help="only validate the labels files")
    parser.add_argument("--corpus", action="store_true", help="print the labelled scripts as a Markdown table")
    args = parser.parse_args(argv)
    try:
        codes = _codes(args.code)
        entries, warnings = load_labels(args.labels)
    except LabelError as exc:
        print(f"eval.py: {exc}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.check:
        print(f"{len(entries)} entries from {len({e.repo for e in entries})} repositories: labels are valid")
        return 0
    if args.corpus:
        print(render_corpus(entries))
        return 0
    if args.mirrors is None:
        print("eval.py: a mirrors file is required (JSON object: owner/name -> git directory)", file=sys.stderr)
        return 2
    try:
        mirrors = json.loads(args.mirrors.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"eval.py: {args.mirrors}: cannot read the mirrors file: {exc}", file=sys.stderr)
        return 2
    if not isinstance(mirrors, dict):
        print(f"eval.py: {args.mirrors}: must be a JSON object of owner/name -> git directory", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda e: evaluate(e, mirrors, codes), entries))
    skipped = sorted({r.entry.repo for r in results if r.error == "no mirror"})
    for repo in skipped:
        print(f"warning: {repo}: not in {args.mirrors}, its scripts are skipped", file=sys.stderr)
    print(render_json(results, codes, skipped) if args.json else render_text(results, codes, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
