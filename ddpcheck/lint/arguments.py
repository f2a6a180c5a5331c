"""`ddpcheck lint`'s command line: a small table-driven parser.

The lint path must start fast enough for a pre-commit hook, so it does not build typer's parameter
machinery (which imports pydantic). Help and usage errors keep the layout of the other commands:
`Usage: ...`, `Try 'ddpcheck lint -h' for help.`, `Error: ...`, exit 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ddpcheck.lint.command import LintOptions

USAGE = "Usage: ddpcheck lint [OPTIONS] [PATHS]..."
SUMMARY = "Lint training scripts statically (never imports or runs them)."


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    dest: str
    help: str
    metavar: str | None = None  # None: a flag without a value
    many: bool = False  # may be given several times; comma-separated values are split


OPTIONS: tuple[Option, ...] = (
    Option(("--select",), "select", "Codes or prefixes to enable, replacing the configured set (comma-separated).", "CODES", True),
    Option(("--extend-select",), "extend_select", "Codes or prefixes to enable on top of the configured set.", "CODES", True),
    Option(("--ignore",), "ignore", "Codes or prefixes to disable.", "CODES", True),
    Option(("--config",), "config", "Use this pyproject.toml / TOML file for every file.", "PATH"),
    Option(("--output-format",), "output_format", "full, concise, json, github, sarif (code scanning) or junit (CI test reports). [default: full]", "FORMAT"),
    Option(("--output-file", "-o"), "output_file", "Write the report to this file instead of standard output.", "PATH"),
    Option(("--statistics",), "statistics", "Print how many findings each code has instead of the findings."),
    Option(("--exit-zero",), "exit_zero", "Exit 0 even when there are findings."),
    Option(("--exit-non-zero-on-fix",), "exit_non_zero_on_fix", "Exit 1 when a fix changed a file, even if no finding is left."),
    Option(("--fix",), "fix", "Apply safe fixes in place."),
    Option(("--unsafe-fixes",), "unsafe_fixes", "With --fix, --fix-only or --diff: apply unsafe fixes too."),
    Option(("--fix-only",), "fix_only", "Apply fixes but report nothing about what is left (implies --fix; exit 0)."),
    Option(("--show-fixes",), "show_fixes", "After --fix, list what was fixed, per file and code."),
    Option(("--diff",), "diff", "Print the fixes as a unified diff instead of writing them."),
    Option(("--add-noqa",), "add_noqa", "Append `# noqa: CODE` to every reported line (merged with an existing noqa)."),
    Option(("--exclude",), "exclude", "Glob patterns to skip, replacing the default list.", "PATTERNS", True),
    Option(("--extend-exclude",), "extend_exclude", "Glob patterns to skip on top of the default list.", "PATTERNS", True),
    Option(("--force-exclude",), "force_exclude", "Apply excludes to paths named on the command line too (for pre-commit)."),
    Option(("--stdin-filename",), "stdin_filename", "The name to report (and configure) stdin as.", "NAME"),
    Option(("--show-settings",), "show_settings", "Print the settings that apply to the first path and exit."),
    Option(("--jobs", "-j"), "jobs", "Worker processes (default: one per idle CPU, for 8 files or more per worker).", "N"),
    Option(("--no-cache",), "no_cache", "Lint every file again instead of reusing cached findings (.ddpcheck_cache/)."),
    Option(("--help", "-h"), "help", "Show this message and exit."),
)
_BY_FLAG = {flag: option for option in OPTIONS for flag in option.flags}


class UsageError(Exception):
    """A command-line mistake: printed with the usage line, exit 2."""


def help_text() -> str:
    rows = [(", ".join(o.flags) + (f" {o.metavar}" if o.metavar else ""), o.help) for o in OPTIONS]
    width = max(len(left) for left, _ in rows) + 2
    lines = [USAGE, "", f"  {SUMMARY}", "", "Arguments:",
             f"  {'PATHS...':<{width}}Files or directories to lint (default: .). `-` reads stdin.", "", "Options:"]
    lines += [f"  {left:<{width}}{text}" for left, text in rows]
    return "\n".join(lines) + "\n"


def _split(values: list[str]) -> tuple[str, ...]:
    return tuple(c for v in values for c in v.replace(" ", ",").split(",") if c)


def parse(argv: list[str], *, color: bool = False) -> LintOptions | None:
    """The options for `argv` (the words after `lint`); None when help was asked for (printed).
    Raises UsageError."""
    flags: set[str] = set()  # options without a value that were given
    values: dict[str, str] = {}  # the value of each option given once (the last one wins)
    lists: dict[str, list[str]] = {}  # the values of each option that may be given several times
    paths: list[str] = []
    words = iter(argv)
    for word in words:
        if word == "--":
            paths.extend(words)
            break
        if not word.startswith("-") or word == "-":
            paths.append(word)
            continue
        flag, eq, inline = word.partition("=")
        if not word.startswith("--") and len(word) > 2 and word[:2] in _BY_FLAG:
            flag, eq, inline = word[:2], "=", word[2:]  # -j2
        option = _BY_FLAG.get(flag)
        if option is None:
            raise UsageError(f"No such option: {flag}{_suggest(flag)}")
        if option.dest == "help":
            sys.stdout.write(help_text())
            return None
        if option.metavar is None:
            if eq:
                raise UsageError(f"Option '{flag}' does not take a value.")
            flags.add(option.dest)
            continue
        value = inline if eq else next(words, None)
        if value is None:
            raise UsageError(f"Option '{flag}' requires an argument.")
        if option.many:
            lists.setdefault(option.dest, []).append(value)
        else:
            values[option.dest] = value
    return _options(flags, values, lists, paths, color)


def _options(flags: set[str], values: dict[str, str], lists: dict[str, list[str]], paths: list[str],
             color: bool) -> LintOptions:
    def many(dest: str) -> tuple[str, ...] | None:
        return _split(lists[dest]) if dest in lists else None

    jobs: int | None = None
    if "jobs" in values:
        try:
            jobs = int(values["jobs"])
        except ValueError:
            raise UsageError(f"Invalid value for '--jobs' / '-j': '{values['jobs']}' is not a whole number.") from None
    config = values.get("config")
    fix_only = "fix_only" in flags
    return LintOptions(
        paths=paths or ["."],
        select=many("select"),
        extend_select=many("extend_select") or (),
        ignore=many("ignore") or (),
        config=Path(config) if config is not None else None,
        output_format=values.get("output_format", "full"),
        output_file=Path(values["output_file"]) if "output_file" in values else None,
        statistics="statistics" in flags,
        exit_zero="exit_zero" in flags,
        exit_non_zero_on_fix="exit_non_zero_on_fix" in flags,
        fix="fix" in flags or fix_only,
        fix_only=fix_only,
        unsafe_fixes="unsafe_fixes" in flags,
        show_fixes="show_fixes" in flags,
        diff="diff" in flags,
        add_noqa="add_noqa" in flags,
        exclude=many("exclude"),
        extend_exclude=many("extend_exclude") or (),
        force_exclude="force_exclude" in flags,
        stdin_filename=values.get("stdin_filename"),
        show_settings="show_settings" in flags,
        color=color,
        jobs=jobs,
        no_cache="no_cache" in flags,
    )


def _suggest(flag: str) -> str:
    import difflib

    close = difflib.get_close_matches(flag, list(_BY_FLAG), n=1)
    return f" (Possible options: {close[0]})" if close else ""


def usage_error(message: str) -> str:
    """The text printed for a usage error (the layout the other commands use)."""
    return f"{USAGE}\nTry 'ddpcheck lint -h' for help.\n\nError: {message}\n"
