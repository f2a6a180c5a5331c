"""`ddpcheck trace DUMPS... [--source DIR]`: from arguments to exit code.

Exit 0: the dumps show every rank in step; 1: a divergence (or a rank that left no dump);
2: a file that could not be read (one line each, the others still analysed) or a usage error."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from dataclasses import dataclass, field

from ddpcheck.findings import Finding, ToolError
from ddpcheck.tool_codes import UnreadableFile
from ddpcheck.trace import align, causes, dumps, verdicts


@dataclass
class TraceResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[ToolError] = field(default_factory=list)
    ranks: tuple[int, ...] = ()
    comparisons: list[align.Comparison] = field(default_factory=list)
    source: str = "."
    missing: tuple[int, ...] = ()
    world_listed: bool = True  # the dumps say which ranks the job had


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ddpcheck trace",
        description="Explain a hung or crashed job from PyTorch Flight Recorder dumps (one file per rank: "
                    "TORCH_FR_BUFFER_SIZE and TORCH_FR_DUMP_TEMP_FILE; see docs/trace.md).")
    p.add_argument("dumps", nargs="+", metavar="DUMPS", help="dump files, or directories of them")
    p.add_argument("--source", default=".", metavar="DIR",
                   help="where the job's scripts are here (the frames' paths are matched under it; default: .)")
    p.add_argument("--output-format", default="full",
                   choices=("full", "concise", "json", "github", "sarif", "junit"))
    p.add_argument("-o", "--output-file", default=None, metavar="PATH")
    p.add_argument("--no-causes", action="store_true", help="do not lint the scripts for likely causes")
    return p


def analyse(paths: list[str], source: str, lint: causes.Linter | None) -> TraceResult:
    result = TraceResult(source=source)
    read: list[dumps.Dump] = []
    files = dumps.discover(paths)
    # Millions of small objects and no cycles among them: the cyclic collector would rescan them
    # all again and again (a 1,024-rank set read 40 % slower per rank than a 64-rank one).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for path in files:
            try:
                read.append(dumps.read(path))
            except dumps.DumpError as err:
                result.errors.append(ToolError(path, str(err), UnreadableFile.code))
    finally:
        if collecting:
            gc.enable()
    by_rank: dict[int, dumps.Dump] = {}
    for dump in read:
        # A rank's pickle and JSON forms side by side: keep the one with stacks (JSON has none).
        if dump.rank not in by_rank or _frames(dump) > _frames(by_rank[dump.rank]):
            by_rank[dump.rank] = dump
    if not by_rank:
        return result
    kept = list(by_rank.values())
    result.ranks, result.world_listed = align.expected_ranks(kept)
    result.comparisons = align.root_first(align.compare(kept))
    elsewhere = verdicts.waiting_places(result.comparisons)
    for comparison in result.comparisons:
        verdict = verdicts.from_comparison(comparison, source, elsewhere)
        if verdict is None:
            continue
        static: list[Finding] = []
        if lint is not None:
            verdict, static = causes.attach(verdict, comparison, source, lint)
        result.findings.append(verdict)
        result.findings += [f for f in static if f not in result.findings]
    missing = result.missing = tuple(r for r in result.ranks if r not in by_rank)
    if missing:
        default = next((c for c in result.comparisons if c.group == "0"), None)
        last = default.sides[0].call or default.sides[0].last if default and default.sides else None
        result.findings.insert(0, verdicts.dead_ranks(missing, len(result.ranks), last, source))
    return result


def run(argv: list[str], lint: causes.Linter | None) -> int:
    options = parser().parse_args(argv)
    if not os.path.isdir(options.source):
        print(f"ddpcheck: error: --source {options.source}: not a directory", file=sys.stderr)
        return 2
    result = analyse(options.dumps, options.source, None if options.no_causes else lint)
    for error in result.errors:
        print(f"ddpcheck: error: {error.line}", file=sys.stderr)
    if not result.ranks and not result.errors:
        print("ddpcheck: error: no Flight Recorder dumps found", file=sys.stderr)
        return 2
    from ddpcheck.report import render

    sources = _sources(result.findings)
    text = render(options.output_format, result.findings, sources=sources, tool="trace", errors=result.errors)
    if options.output_format in ("full", "concise") and result.ranks:
        text = _headline(result) + "\n" + text
    if options.output_file:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(options.output_file)), exist_ok=True)
            with open(options.output_file, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            print(f"ddpcheck: error: -o {options.output_file}: cannot write it ({err.strerror or err})",
                  file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    if result.errors or not result.ranks:
        return 2
    return 1 if result.findings else 0


def _frames(dump: dumps.Dump) -> int:
    return sum(len(c.raw_frames) for calls in dump.calls.values() for c in calls)


def _headline(result: TraceResult) -> str:
    groups = len(result.comparisons)
    default = next((c for c in result.comparisons if c.group == "0"), None)
    tail = ""
    if default is not None and default.kind == "healthy" and default.sides and default.sides[0].call \
            and not result.missing:
        call = default.sides[0].call
        where = verdicts.places(call, result.source)
        tail = (f"; every rank's last call in the default group is #{call.seq} {call.describe()}"
                + (f" at {where[0].shown()}" if where else ""))
    dumped = len(result.ranks) - len(result.missing)
    unlisted = "" if result.world_listed else (
        " (the dumps do not list the job's ranks, as gloo's may not: a rank with no file would go unnoticed)")
    return (f"ddpcheck trace: dumps of {dumped} of {len(result.ranks)} ranks, "
            f"{groups} process group{'s' if groups != 1 else ''}{tail}{unlisted}")


def _sources(findings: list[Finding]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for f in findings:
        if f.path and f.path not in texts and os.path.isfile(f.path):
            try:
                with open(f.path, encoding="utf-8", errors="replace") as handle:
                    texts[f.path] = handle.read()
            except OSError:
                pass
    return texts
