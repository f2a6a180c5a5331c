"""The typer app behind `ddpcheck rules | explain | config | run` and `ddpcheck --help`.

`lint` and `run` take their arguments raw (cli.py dispatches them before this app is built)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

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


@app.command(
    "lint",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def lint_command(ctx: typer.Context) -> None:
    """Lint training scripts statically (never imports or runs them)."""
    # cli.main hands `ddpcheck lint ...` to lint/arguments.py before this app is built; this
    # entry lists the command in `ddpcheck --help`.
    from ddpcheck import commands

    raise typer.Exit(commands.lint(list(ctx.args)))


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
    from ddpcheck import commands

    raise typer.Exit(commands.run(list(ctx.args)))




@app.command(
    "trace",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def trace_command(ctx: typer.Context) -> None:
    """Explain a hung or crashed job from PyTorch Flight Recorder dumps: ddpcheck trace DUMPS... [--source DIR]
    (`ddpcheck trace --help` for the options)."""
    from ddpcheck import commands

    raise typer.Exit(commands.trace(list(ctx.args)))
