"""Which runtime checks a run makes: Ruff's selection, as `ddpcheck lint` does it (ddpcheck/config.py).

The default set (every runtime check), then the `[tool.ddpcheck]` table of the nearest
pyproject.toml above the script (or `--config PATH`), then the command line: `--select` replaces
the set, `--extend-select` adds, `--ignore` removes; codes or prefixes (`DDP10`, `DDP105`, `ALL`).
One code space serves both halves, so `select = ["DDP0"]` in the table selects no runtime check.
`--checks PROBES` is a `--select` of the named probes' codes. `per-file-ignores` is lint's only.
"""

from __future__ import annotations

from pathlib import Path

from ddpcheck.errors import UserError
from ddpcheck.run import registry


def selected_codes(*, select: tuple[str, ...] | None, extend_select: tuple[str, ...], ignore: tuple[str, ...],
                   probes: tuple[str, ...] | None, config: Path | None, script: Path) -> tuple[str, ...]:
    """The runtime codes this run checks, sorted."""
    from ddpcheck.catalog import all_rules
    from ddpcheck.config import Selection, SettingsResolver, validate_codes

    known = all_rules()
    if probes is not None:
        select = _probe_codes(probes)
    overrides = Selection(
        select=None if select is None else validate_codes(select, "--select", known),
        extend_select=validate_codes(extend_select, "--extend-select", known),
        ignore=validate_codes(ignore, "--ignore", known),
    )
    settings = SettingsResolver(known, config=config, overrides=overrides).for_path(script)
    runtime = registry.checks()
    return tuple(sorted(c for c in settings.enabled_codes(known) if c in runtime))


def _probe_codes(names: tuple[str, ...]) -> tuple[str, ...]:
    known = registry.probe_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UserError(f"--checks: unknown check {', '.join(unknown) or '(empty)'}; choose from {', '.join(known)}")
    return tuple(c for p in registry.probes() if p.name in names for c in p.codes)
