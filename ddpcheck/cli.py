"""The command line: `ddpcheck lint | run | rules | explain | config`.

Thin on purpose: parsing and wording live here, work lives in lint/, run/ and report/. Importing
this module imports neither torch nor libcst; each command imports what it needs when it runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ddpcheck import __version__
from ddpcheck.errors import UserError

app = typer.Typer(
    name="ddpcheck",
    help="Find the mistakes that make DistributedDataParallel training silently wrong, slow or hung.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ddpcheck {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    pass


def _codes(values: Optional[List[str]]) -> tuple[str, ...]:
    out: list[str] = []
    for v in values or []:
        out.extend(c for c in v.replace(" ", ",").split(",") if c)
    return tuple(out)


def _use_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def _error(message: str) -> None:
    typer.echo(f"ddpcheck: error: {message}", err=True)


@app.command()
def lint(
    paths: Optional[List[str]] = typer.Argument(None, help="Files or directories to lint (default: .). `-` reads stdin."),
    select: Optional[List[str]] = typer.Option(None, "--select", help="Codes or prefixes to enable, replacing the configured set (comma-separated)."),
    extend_select: Optional[List[str]] = typer.Option(None, "--extend-select", help="Codes or prefixes to enable on top of the configured set."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", help="Codes or prefixes to disable."),
    config: Optional[Path] = typer.Option(None, "--config", help="Use this pyproject.toml / TOML file for every file."),
    output_format: str = typer.Option("full", "--output-format", help="full, concise, json, github, sarif (code scanning) or junit (CI test reports)."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even when there are findings."),
    fix: bool = typer.Option(False, "--fix", help="Apply safe fixes in place."),
    unsafe_fixes: bool = typer.Option(False, "--unsafe-fixes", help="With --fix or --diff: apply unsafe fixes too."),
    diff: bool = typer.Option(False, "--diff", help="Print the fixes as a unified diff instead of writing them."),
    exclude: Optional[List[str]] = typer.Option(None, "--exclude", help="Glob patterns to skip, replacing the default list."),
    extend_exclude: Optional[List[str]] = typer.Option(None, "--extend-exclude", help="Glob patterns to skip on top of the default list."),
    force_exclude: bool = typer.Option(False, "--force-exclude", help="Apply excludes to paths named on the command line too (for pre-commit)."),
    stdin_filename: Optional[str] = typer.Option(None, "--stdin-filename", help="The name to report (and configure) stdin as."),
    show_settings: bool = typer.Option(False, "--show-settings", help="Print the settings that apply to the first path and exit."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Worker processes to lint with (default: one per CPU when there are enough files)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Lint every file again instead of reusing cached findings (.ddpcheck_cache/)."),
) -> None:
    """Lint training scripts statically (never imports or runs them)."""
    from ddpcheck.lint.command import LintOptions, run_lint

    options = LintOptions(
        paths=list(paths or ["."]),
        select=_codes(select) if select else None,
        extend_select=_codes(extend_select),
        ignore=_codes(ignore),
        config=config,
        output_format=output_format,
        exit_zero=exit_zero,
        fix=fix,
        unsafe_fixes=unsafe_fixes,
        diff=diff,
        exclude=_codes(exclude) if exclude else None,
        extend_exclude=_codes(extend_exclude),
        force_exclude=force_exclude,
        stdin_filename=stdin_filename,
        show_settings=show_settings,
        color=_use_color(sys.stdout),
        jobs=jobs,
        no_cache=no_cache,
    )
    raise typer.Exit(run_lint(options))


@app.command("rules")
def rules_command(
    output_format: str = typer.Option("text", "--output-format", help="text or json."),
) -> None:
    """List every rule: code, name, kind, severity, default, fixable, summary."""
    import json

    from ddpcheck.catalog import all_rules

    infos = list(all_rules().values())
    if output_format == "json":
        typer.echo(json.dumps([
            {"code": i.code, "name": i.name, "kind": i.kind, "severity": i.severity.value,
             "default": i.default_enabled, "fixable": i.fixable, "summary": i.summary, "url": i.url}
            for i in infos], indent=2))
        return
    if output_format != "text":
        raise UserError(f"--output-format {output_format}: choose text or json")
    width = max(len(i.name) for i in infos)
    typer.echo(f"{'CODE':<7} {'NAME':<{width}} {'KIND':<4} {'SEVERITY':<8} {'DEFAULT':<7} {'FIX':<3} SUMMARY")
    for i in infos:
        typer.echo(
            f"{i.code:<7} {i.name:<{width}} {i.kind:<4} {i.severity.value:<8} "
            f"{'on' if i.default_enabled else 'off':<7} {'yes' if i.fixable else '-':<3} {i.summary}"
        )


@app.command()
def explain(code: str = typer.Argument(..., help="A rule code such as DDP002, or its name.")) -> None:
    """Print a rule's page: what it catches, why it matters, examples, how to fix."""
    import difflib

    from ddpcheck.catalog import all_rules, render_page

    rules = all_rules()
    wanted = code.strip()
    info = rules.get(wanted.upper()) or next((i for i in rules.values() if i.name == wanted), None)
    if info is None:
        close = difflib.get_close_matches(wanted.upper(), list(rules), n=1) or difflib.get_close_matches(
            wanted, [i.name for i in rules.values()], n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UserError(f"unknown rule '{code}'{hint} Run `ddpcheck rules` to list them")
    typer.echo(render_page(info), nl=False)


@app.command("config")
def config_command(
    path: Path = typer.Argument(Path("."), help="The file (or directory) to show the settings for."),
    config: Optional[Path] = typer.Option(None, "--config", help="Use this TOML file instead of discovery."),
) -> None:
    """Print the settings that apply to a file and where they come from."""
    from ddpcheck.catalog import all_rules
    from ddpcheck.config import SettingsResolver, describe

    known = all_rules()
    resolver = SettingsResolver(known, config=config)
    typer.echo(describe(resolver.for_path(path), known, path))


@app.command(
    "run",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def run_command(ctx: typer.Context) -> None:
    """Run a training script on torchrun and check it across ranks: ddpcheck run --nproc N script.py [ARGS...]
    (`ddpcheck run --help` for the options)."""
    raise typer.Exit(_run(list(ctx.args)))


def _run(argv: list[str]) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UserError(
            "`ddpcheck run` needs PyTorch, which is not installed; install it with "
            "`pip install 'ddpcheck[run]'` (or install a torch build for your platform first)"
        )
    from ddpcheck.run.launcher.entry import main as run_main

    return run_main(argv)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. Never lets a traceback from ddpcheck reach the user."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["run"]:
            # The run command's arguments belong to torchrun and the user's script: pass them raw.
            sys.exit(_run(argv[1:]))
        app(args=argv, prog_name="ddpcheck")
    except UserError as err:
        _error(str(err))
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        # `ddpcheck lint | head`: the reader left; say nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except SystemExit:
        raise
    except Exception as err:  # noqa: BLE001 — the last line of defence against tracebacks
        if os.environ.get("DDPCHECK_DEBUG"):
            raise
        _error(f"internal error: {type(err).__name__}: {err} (set DDPCHECK_DEBUG=1 for the traceback and please report it)")
        sys.exit(2)
