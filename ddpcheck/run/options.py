"""`ddpcheck run`'s own options, split from torchrun's on one command line.

    ddpcheck run [--nproc N] [torchrun options] [ddpcheck options] SCRIPT [ARGS...]
    ddpcheck run [...] -m MODULE [ARGS...]

Our option names are chosen so that none is torchrun's or a prefix-abbreviation of one
(`--nproc` is the only short spelling we add, and it is an exact name, so argparse never
confuses it with `--nproc-per-node`). Torch-free: building the parser imports torchrun's
parser lazily, only when a run is launched.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from ddpcheck.errors import UserError

# The probe names `--checks` accepts, in the order the summary lists them.
PROBES = ("shards", "inputs", "set-epoch", "grads", "params", "lifecycle", "rendezvous")
OUTPUT_FORMATS = ("full", "concise", "json", "sarif", "github")

CONFIG_ENV = "DDPCHECK_RUN_CONFIG"  # JSON of RunOptions + the record dir, read by every rank


@dataclass(frozen=True)
class RunOptions:
    """What the ranks and the report need to know. Travels to the ranks as JSON in CONFIG_ENV."""

    checks: tuple[str, ...] = PROBES
    check_first: int = 20  # check every optimizer step for the first K steps ...
    check_every: int = 50  # ... then every N-th step
    report: str | None = None
    output_format: str = "full"
    record_dir: str = ""
    quiet: bool = False
    extra: dict = field(default_factory=dict)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ=os.environ) -> "RunOptions | None":
        raw = environ.get(CONFIG_ENV)
        if not raw:
            return None
        data = json.loads(raw)
        data["checks"] = tuple(data.get("checks", PROBES))
        return cls(**data)

    def is_checked(self, step: int) -> bool:
        """Is optimizer step `step` (1-based) one we check? Every step for the first K, then every N-th."""
        if step <= self.check_first:
            return True
        return self.check_every > 0 and step % self.check_every == 0


def add_own_options(parser) -> None:
    """Add ddpcheck's options to torchrun's argparse parser (names checked not to collide)."""
    group = parser.add_argument_group("ddpcheck")
    group.add_argument("--nproc", dest="ddpcheck_nproc", default=None, metavar="N",
                       help="Processes on this node (same as torchrun's --nproc-per-node). Default 2.")
    group.add_argument("--report", dest="ddpcheck_report", default=None, metavar="PATH",
                       help="Write the full JSON report (schema in ddpcheck/run/REPORT.md) to PATH.")
    group.add_argument("--output-format", dest="ddpcheck_output_format", default="full", metavar="FORMAT",
                       help="How to print the result: full (a table), concise, json (the --report document), sarif or github.")
    group.add_argument("--checks", dest="ddpcheck_checks", default=None, metavar="LIST",
                       help="Comma-separated probes to run: " + ",".join(PROBES) + " (default: all).")
    group.add_argument("--check-first", dest="ddpcheck_check_first", default=20, metavar="K",
                       help="Check every optimizer step for the first K steps (default 20).")
    group.add_argument("--check-every", dest="ddpcheck_check_every", default=50, metavar="N",
                       help="After the first K steps, check every N-th step (default 50; 0: never).")
    group.add_argument("--quiet", dest="ddpcheck_quiet", action="store_true",
                       help="No progress lines from ddpcheck during the run.")
    # Issue 5 (diagnostics.py): CUDA emulation, hangs, spawn-style scripts.
    group.add_argument("--cpu", dest="ddpcheck_cpu", action="store_true",
                       help="Run a GPU script on the CPU with CUDA emulated (automatic without CUDA).")
    group.add_argument("--hang-timeout", dest="ddpcheck_hang_timeout", default=30, metavar="S",
                       help="Seconds without progress on every rank before ddpcheck calls it a hang, "
                       "names where each rank waits and stops the job (default 30; 0: never).")
    group.add_argument("--collective-timeout", dest="ddpcheck_collective_timeout", default=0, metavar="S",
                       help="Give init_process_group(timeout=S) when the script passes none, so a "
                       "stuck collective raises after S seconds (default 0: the script's own).")
    group.add_argument("--spawn", dest="ddpcheck_spawn", action="store_true",
                       help="The script starts its own workers (mp.spawn): run it with the plain "
                       "interpreter (detected automatically when the call is in the script).")


def _non_negative_int(value, flag: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: expected a whole number, got {value!r}") from None
    if number < 0:
        raise UserError(f"{flag}: expected 0 or more, got {number}")
    return number


def own_options_from(ns, record_dir: str) -> RunOptions:
    """Validate our options from the parsed namespace; every mistake is one UserError line."""
    checks = PROBES
    if ns.ddpcheck_checks is not None:
        wanted = [c.strip() for c in ns.ddpcheck_checks.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in PROBES]
        if unknown or not wanted:
            raise UserError(
                f"--checks: unknown check {', '.join(unknown) or '(empty)'}; choose from {', '.join(PROBES)}"
            )
        checks = tuple(c for c in PROBES if c in wanted)
    fmt = ns.ddpcheck_output_format
    if fmt not in OUTPUT_FORMATS:
        raise UserError(f"--output-format: unknown format {fmt!r}; choose from {', '.join(OUTPUT_FORMATS)}")
    return RunOptions(
        checks=checks,
        check_first=_non_negative_int(ns.ddpcheck_check_first, "--check-first"),
        check_every=_non_negative_int(ns.ddpcheck_check_every, "--check-every"),
        report=os.path.abspath(ns.ddpcheck_report) if ns.ddpcheck_report else None,
        output_format=fmt,
        record_dir=record_dir,
        quiet=bool(ns.ddpcheck_quiet),
        extra={"cpu": bool(ns.ddpcheck_cpu), "spawn": bool(ns.ddpcheck_spawn),
               "hang_timeout": _non_negative_float(ns.ddpcheck_hang_timeout, "--hang-timeout"),
               "collective_timeout": _non_negative_float(ns.ddpcheck_collective_timeout, "--collective-timeout"),
               "nproc_given": ns.ddpcheck_nproc is not None},
    )


def _non_negative_float(value, flag: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: expected a number of seconds, got {value!r}") from None
    if number < 0:
        raise UserError(f"{flag}: expected 0 or more, got {value}")
    return number
