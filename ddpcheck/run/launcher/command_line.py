"""The `ddpcheck run` command line, split into torchrun's options, ddpcheck's and the target.

    ddpcheck run [--nproc N] [torchrun options] [ddpcheck options] SCRIPT [ARGS...]
    ddpcheck run [...] -m MODULE [ARGS...]

Parsed with torchrun's own parser (so every torchrun option and its environment-variable form
passes through unchanged) with ddpcheck's options added to it; the training program is then
swapped for the rank bootstrap module. Our option names are chosen so that none is torchrun's or a
prefix-abbreviation of one (`--nproc` is an exact name, so argparse never confuses it with
`--nproc-per-node`). torchrun's parser is imported only when a run is launched.
"""

from __future__ import annotations

import argparse
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ddpcheck.errors import UserError
from ddpcheck.run.run_options import RunOptions

BOOTSTRAP = "ddpcheck.run.rank.bootstrap"
OUTPUT_FORMATS = ("full", "concise", "json", "sarif", "github")
_RDZV_FLAGS = ("--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
               "--master-port", "--master_port", "--master-addr", "--master_addr", "--standalone")
_NODE_FLAGS = ("--nnodes", "--node-rank", "--node_rank", "--rdzv-id", "--rdzv_id")
_NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")
DEFAULT_NPROC = "2"


@dataclass(frozen=True)
class Target:
    """What each rank runs: a script path (absolute) or a module name, and its arguments."""

    kind: str  # "script" or "module"
    name: str
    args: tuple[str, ...]

    def bootstrap_args(self) -> list[str]:
        return ["--" + self.kind, self.name, *self.args]


@dataclass(frozen=True)
class Launch:
    torchrun_args: argparse.Namespace  # what torchrun's run() takes
    target: Target
    options: RunOptions
    nproc: int
    nnodes_max: int
    nodes: int = 1  # emulated nodes on this machine (`--nodes`): one torchrun agent each


def _parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "ddpcheck run"
    parser.description = "Run a DDP training script on torchrun and check it across ranks."
    add_own_options(parser)

    def error(message: str) -> NoReturn:  # argparse would print usage and sys.exit(2); we say one line
        raise UserError(f"ddpcheck run: {message} (see `ddpcheck run --help`)")

    setattr(parser, "error", error)
    return parser


def _given(argv_before_script: list[str], flags: tuple[str, ...]) -> bool:
    return any(a == f or a.startswith(f + "=") for a in argv_before_script for f in flags)


def parse(argv: list[str], record_dir: str, nproc: int | None = None) -> Launch:
    """Split `argv` into torchrun's options, ours, and the target; validate all of it. `nproc`
    overrides the number of processes (one run of `--scaling`)."""
    parser = _parser()
    ns = parser.parse_args(argv)
    # Options before the script are launcher options; everything after it belongs to the script.
    n_before = len(argv) - len(ns.training_script_args) - 1
    before = argv[:n_before]

    if ns.no_python or ns.run_path:
        flag = "--no-python" if ns.no_python else "--run-path"
        raise UserError(f"ddpcheck run: {flag} is not supported: each rank must start Python with "
                        "ddpcheck's bootstrap; drop the flag")
    if ns.ddpcheck_nproc is not None and (_given(before, _NPROC_FLAGS) or os.environ.get("PET_NPROC_PER_NODE")):
        raise UserError("ddpcheck run: give either --nproc or --nproc-per-node, not both")
    if ns.ddpcheck_scaling is not None and (ns.ddpcheck_nproc is not None or _given(before, _NPROC_FLAGS)):
        raise UserError("ddpcheck run: --scaling sets the number of processes of each run; drop --nproc")
    if nproc is not None:
        ns.nproc_per_node = str(nproc)
    elif ns.ddpcheck_nproc is not None:
        ns.nproc_per_node = str(ns.ddpcheck_nproc)
    elif not _given(before, _NPROC_FLAGS) and not os.environ.get("PET_NPROC_PER_NODE"):
        # A rehearsal's node is a GPU node: 8 GPUs unless told otherwise.
        ns.nproc_per_node = DEFAULT_NPROC if ns.ddpcheck_rehearse is None else "8"
    try:
        from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

        nproc = determine_local_world_size(ns.nproc_per_node)
        nnodes_min, nnodes_max = parse_min_max_nnodes(ns.nnodes)
    except (ValueError, RuntimeError) as exc:
        raise UserError(f"ddpcheck run: bad --nproc/--nproc-per-node or --nnodes: {exc}") from None
    if not 1 <= nnodes_min <= nnodes_max:
        raise UserError(f"ddpcheck run: --nnodes {ns.nnodes}: expected 1 or more nodes (N or MIN:MAX)")
    if nproc < 1:  # torchrun would fail later with a bare AssertionError
        flag = "--nproc" if ns.ddpcheck_nproc is not None else "--nproc-per-node"
        raise UserError(f"ddpcheck run: {flag} {ns.nproc_per_node}: expected 1 or more processes")
    if ns.ddpcheck_rehearse is not None and (ns.ddpcheck_scaling is not None or nnodes_max > 1):
        raise UserError("ddpcheck run: --rehearse runs each rank alone on this machine; drop --scaling/--nnodes")
    if ns.ddpcheck_scaling is not None and nnodes_max > 1:
        raise UserError("ddpcheck run: --scaling runs on this node only; drop --nnodes")
    nodes = _nodes(ns, before)
    if nodes > 1:
        nnodes_max = nodes

    if ns.module:
        check_module(ns.training_script)
        target = Target("module", ns.training_script, tuple(ns.training_script_args))
    else:
        path = os.path.abspath(ns.training_script)
        if os.path.isdir(path):
            raise UserError(f"ddpcheck run: {ns.training_script}: is a directory; give a path to a "
                            "Python file or -m MODULE")
        if not os.path.isfile(path):
            raise UserError(f"ddpcheck run: {ns.training_script}: no such script; give a path to a "
                            "Python file or -m MODULE")
        target = Target("script", path, tuple(ns.training_script_args))
    options = own_options_from(ns, record_dir, Path(target.name if target.kind == "script" else os.getcwd()))
    for flag, out in (("--report", options.report), ("--html", options.html)):
        if out is not None and target.kind == "script" and os.path.exists(out) and os.path.samefile(out, target.name):
            raise UserError(f"ddpcheck run: {flag} {ns.training_script}: that is the script being run; "
                            "give another file for the report")

    # Single node and no rendezvous chosen: a standalone c10d rendezvous on loopback with a free
    # port, so two jobs on one machine never collide (torchrun's own --standalone).
    if nnodes_max == 1 and not _given(before, _RDZV_FLAGS) and not any(
        os.environ.get(v) for v in ("PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_MASTER_PORT")
    ):
        ns.standalone = True

    for own in [k for k in vars(ns) if k.startswith("ddpcheck_")]:
        delattr(ns, own)
    ns.module = True
    ns.training_script = BOOTSTRAP
    ns.training_script_args = target.bootstrap_args()
    return Launch(ns, target, options, nproc, nnodes_max, nodes)


def _nodes(ns: argparse.Namespace, before: list[str]) -> int:
    """`--nodes N`: N torchrun agents on this machine, one per emulated node, that meet in a c10d
    rendezvous on loopback (a free port, a fresh id), as N machines of a cluster would. 1: the
    plain single-node run."""
    if ns.ddpcheck_nodes is None:
        return 1
    nodes = _non_negative_int(ns.ddpcheck_nodes, "--nodes")
    if nodes < 1:
        raise UserError(f"ddpcheck run: --nodes {ns.ddpcheck_nodes}: expected 1 or more nodes")
    if nodes == 1:
        return 1
    given = [f for f in (*_RDZV_FLAGS, *_NODE_FLAGS) if _given(before, (f,))]
    if given:
        raise UserError(f"ddpcheck run: --nodes starts every node on this machine and sets the rendezvous "
                        f"itself; drop {given[0]} (or drop --nodes to join a real multi-machine job)")
    if ns.ddpcheck_scaling is not None:
        raise UserError("ddpcheck run: --scaling runs on one node; drop --nodes")
    ns.nnodes = str(nodes)
    ns.standalone = False
    ns.rdzv_backend = "c10d"
    ns.rdzv_endpoint = f"127.0.0.1:{free_port()}"
    ns.rdzv_id = f"ddpcheck-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return nodes


def free_port() -> int:
    """A TCP port free on loopback now (the rendezvous store binds it a moment later)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def add_own_options(parser: argparse.ArgumentParser) -> None:
    """Add ddpcheck's options to torchrun's argparse parser (names checked not to collide)."""
    group = parser.add_argument_group("ddpcheck")
    group.add_argument("--nproc", dest="ddpcheck_nproc", default=None, metavar="N",
                       help="Processes on this node (same as torchrun's --nproc-per-node). Default 2.")
    group.add_argument("--nodes", dest="ddpcheck_nodes", default=None, metavar="N",
                       help="Emulate N nodes on this machine, each with --nproc ranks (and --nproc "
                       "GPUs under CUDA emulation): N torchrun agents meet on loopback, so LOCAL_RANK "
                       "differs from RANK from the second node on.")
    group.add_argument("--report", dest="ddpcheck_report", default=None, metavar="PATH",
                       help="Write the full JSON report (schema in ddpcheck/run/REPORT.md) to PATH.")
    group.add_argument("--output-format", dest="ddpcheck_output_format", default="full", metavar="FORMAT",
                       help="How to print the result: full (a table), concise, json (the --report document), sarif or github.")
    group.add_argument("--select", dest="ddpcheck_select", action="append", default=None, metavar="CODES",
                       help="Codes or prefixes to check (DDP10, DDP105, ALL), replacing the configured set.")
    group.add_argument("--extend-select", dest="ddpcheck_extend_select", action="append", default=None,
                       metavar="CODES", help="Codes or prefixes to check on top of the configured set.")
    group.add_argument("--ignore", dest="ddpcheck_ignore", action="append", default=None, metavar="CODES",
                       help="Codes or prefixes not to check.")
    group.add_argument("--config", dest="ddpcheck_config", default=None, metavar="PATH",
                       help="Use this TOML file's [tool.ddpcheck] selection instead of the nearest "
                       "pyproject.toml above the script.")
    group.add_argument("--checks", dest="ddpcheck_checks", default=None, metavar="PROBES",
                       help="Comma-separated probes (shards, grads, ...): select their codes, like --select.")
    group.add_argument("--check-first", dest="ddpcheck_check_first", default=20, metavar="K",
                       help="Check every optimizer step for the first K steps (default 20).")
    group.add_argument("--check-every", dest="ddpcheck_check_every", default=50, metavar="N",
                       help="After the first K steps, check every N-th step (default 50; 0: never).")
    group.add_argument("--quiet", dest="ddpcheck_quiet", action="store_true",
                       help="No progress lines from ddpcheck during the run.")
    group.add_argument("--show-skipped", dest="ddpcheck_show_skipped", action="store_true",
                       help="List every skipped or unselected check in the table (by default they "
                       "share one line below it).")
    group.add_argument("--verbose", dest="ddpcheck_verbose", action="store_true",
                       help="Show torchrun's own log lines on the terminal too (they always go to the "
                       "run's log file, named at the end when the job failed).")
    group.add_argument("--cpu", dest="ddpcheck_cpu", action="store_true",
                       help="Run a GPU script on the CPU with CUDA emulated (automatic without CUDA).")
    group.add_argument("--hang-timeout", dest="ddpcheck_hang_timeout", default=30, metavar="S",
                       help="Seconds without progress on every rank before ddpcheck calls it a hang, "
                       "names where each rank waits and stops the job (default 30; 0: never).")
    group.add_argument("--collective-timeout", dest="ddpcheck_collective_timeout", default=0, metavar="S",
                       help="Give init_process_group(timeout=S) when the script passes none, so a "
                       "stuck collective raises after S seconds (default 0: the script's own).")
    group.add_argument("--html", dest="ddpcheck_html", default=None, metavar="PATH",
                       help="Also write the report as one self-contained HTML file (findings, "
                       "per-rank phase breakdown, scaling curve) to PATH.")
    group.add_argument("--scaling", dest="ddpcheck_scaling", default=None, metavar="LIST",
                       help="Run the script at each of these world sizes on this node (e.g. 1,2,4) "
                       "and compare throughput, scaling efficiency and the learning rate used.")
    group.add_argument("--rehearse", dest="ddpcheck_rehearse", default=None, metavar="LIST",
                       help="Rehearse the job at these world sizes (e.g. 8,64,512) on this machine: a few "
                       "representative ranks of each, each alone, with collectives answered locally; "
                       "--nproc is the GPUs per node (default 8).")
    group.add_argument("--spawn", dest="ddpcheck_spawn", action="store_true",
                       help="The script starts its own workers (mp.spawn): run it with the plain "
                       "interpreter (detected automatically when the call is in the script).")


def _non_negative_int(value: Any, flag: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: expected a whole number, got {value!r}") from None
    if number < 0:
        raise UserError(f"{flag}: expected 0 or more, got {number}")
    return number


def own_options_from(ns: argparse.Namespace, record_dir: str, script: Path) -> RunOptions:
    """Validate our options from the parsed namespace; every mistake is one UserError line."""
    from ddpcheck.run.launcher.selection import selected_codes

    if ns.ddpcheck_checks is not None and ns.ddpcheck_select is not None:
        raise UserError("ddpcheck run: give either --select or --checks, not both")
    codes = selected_codes(
        select=_code_list(ns.ddpcheck_select), extend_select=_code_list(ns.ddpcheck_extend_select) or (),
        ignore=_code_list(ns.ddpcheck_ignore) or (), probes=_code_list(None if ns.ddpcheck_checks is None else [ns.ddpcheck_checks], upper=False),
        config=Path(ns.ddpcheck_config) if ns.ddpcheck_config else None, script=script,
    )
    if ns.ddpcheck_report and ns.ddpcheck_html and \
            os.path.abspath(ns.ddpcheck_report) == os.path.abspath(ns.ddpcheck_html):
        raise UserError(f"ddpcheck run: --report and --html both name {ns.ddpcheck_report}; give two files")
    fmt = ns.ddpcheck_output_format
    if fmt not in OUTPUT_FORMATS:
        raise UserError(f"--output-format: unknown format {fmt!r}; choose from {', '.join(OUTPUT_FORMATS)}")
    return RunOptions(
        codes=codes,
        check_first=_non_negative_int(ns.ddpcheck_check_first, "--check-first"),
        check_every=_non_negative_int(ns.ddpcheck_check_every, "--check-every"),
        report=_output_path(ns.ddpcheck_report, "--report", "report.json"),
        output_format=fmt,
        record_dir=record_dir,
        quiet=bool(ns.ddpcheck_quiet),
        verbose=bool(ns.ddpcheck_verbose),
        show_skipped=bool(ns.ddpcheck_show_skipped),
        cpu=bool(ns.ddpcheck_cpu),
        spawn=bool(ns.ddpcheck_spawn),
        hang_timeout=_non_negative_float(ns.ddpcheck_hang_timeout, "--hang-timeout"),
        collective_timeout=_non_negative_float(ns.ddpcheck_collective_timeout, "--collective-timeout"),
        nproc_given=ns.ddpcheck_nproc is not None,
        html=_output_path(ns.ddpcheck_html, "--html", "report.html"),
        scaling=_scaling(ns.ddpcheck_scaling),
        rehearse=_rehearse(ns.ddpcheck_rehearse),
    )


def _scaling(value: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return parse_world_sizes(value, flag="--scaling", example="1,2,4", at_least=2)


def _rehearse(value: str | None) -> tuple[int, ...]:
    if value is None:
        return ()
    from ddpcheck.run.rehearse.plan import MAX_WORLD_SIZE

    return parse_world_sizes(value, flag="--rehearse", example="8,64,512", most=MAX_WORLD_SIZE)


def parse_world_sizes(text: str, *, flag: str, example: str, at_least: int = 1,
                      most: int | None = None) -> tuple[int, ...]:
    """`4,1,2` → (1, 2, 4): the world sizes a flag lists, sorted, each once; one UserError line
    for anything else. `at_least`: how many different sizes the flag needs (1 or 2); `most`: the
    largest size it takes (None: no limit)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise UserError(f"{flag}: {part!r} is not a whole number; give world sizes like {example}") from None
        if most is not None and not 1 <= n <= most:
            raise UserError(f"{flag}: world sizes go from 1 to {most}, got {n}")
        if n < 1:
            raise UserError(f"{flag}: world sizes start at 1, got {n}")
        sizes.append(n)
    if len(set(sizes)) < at_least:
        wanted = "one or more world sizes" if at_least == 1 else "at least two different world sizes"
        raise UserError(f"{flag}: give {wanted}, like {example}")
    return tuple(sorted(set(sizes)))


def _code_list(values: list[str] | None, upper: bool = True) -> tuple[str, ...] | None:
    """`--select A,B --select C` -> ("A", "B", "C"); None when the flag was not given."""
    if values is None:
        return None
    items = [v for value in values for v in value.replace(" ", ",").split(",") if v]
    return tuple(v.upper() if upper else v for v in items)


def _non_negative_float(value: Any, flag: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: expected a number of seconds, got {value!r}") from None
    if number < 0:
        raise UserError(f"{flag}: expected 0 or more, got {value}")
    return number


def _output_path(value: str | None, flag: str, example: str) -> str | None:
    """The absolute path of a file the run will write, checked before anything is launched: a
    job that runs for an hour must not end on a report it cannot write."""
    if not value:
        return None
    path = os.path.abspath(value)
    if os.path.isdir(path) or value.endswith(("/", os.sep)):
        raise UserError(f"ddpcheck run: {flag} {value}: is a directory; give a file path such as "
                        f"{os.path.join(value, example)}")
    folder = os.path.dirname(path)
    while not os.path.exists(folder):  # the folders that are missing are created at the end
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise UserError(f"ddpcheck run: {flag} {value}: {os.path.relpath(folder)} is a file, not a "
                        "directory; give a path in a directory")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UserError(f"ddpcheck run: {flag} {value}: not writable; give a path you can write to")
    return path


def check_module(name: str) -> None:
    """`-m NAME` must name a module the ranks can find: looked up as `python -m` would (the current
    directory first on sys.path), before anything is launched. Parent packages are searched, not
    imported, so nothing of the user's code (or torch) runs here; only when the plain search does
    not find it (a package that extends its own `__path__`) does a child interpreter import the
    parents to ask `importlib.util.find_spec`, as the ranks would."""
    import importlib.machinery
    import importlib.util
    import sys

    parts = name.split(".")
    if not name or not all(p.isidentifier() for p in parts):
        raise UserError(f"ddpcheck run: -m {name}: not a module name; give a dotted name such as "
                        "package.train, or a script path without -m")
    saved = list(sys.path)
    sys.path[:] = [os.getcwd(), *[p for p in saved[1:] if p]]  # what the ranks' `python -m` sees
    missing: str | None = None
    searched = False  # a package's folders were searched for the missing part
    try:
        spec = importlib.util.find_spec(parts[0])
        found = parts[0]
        for part in parts[1:]:
            if spec is None or spec.submodule_search_locations is None:
                break
            found = f"{found}.{part}"
            spec = importlib.machinery.PathFinder.find_spec(found, _locations(spec))
            searched = True
        if spec is None:
            missing = found
        elif found != name:  # a plain module where a package was needed: nothing below it
            missing = name
            searched = False
        elif spec.submodule_search_locations is not None and importlib.machinery.PathFinder.find_spec(
                f"{name}.__main__", _locations(spec)) is None:
            raise UserError(f"ddpcheck run: -m {name}: is a package without __main__.py and cannot be run; "
                            "give the module inside it that starts the training (-m package.train)")
    except UserError:
        raise
    except (ImportError, ValueError):
        missing = None  # the search itself failed: leave the verdict to the ranks
    except Exception:  # noqa: BLE001 - a nested namespace package needs its parent imported
        missing, searched = name, True
    finally:
        sys.path[:] = saved
    if missing is None or (searched and _found_by_importing_parents(name)):
        return
    raise UserError(f"ddpcheck run: -m {name}: no module named {missing!r} in the current directory or "
                    "on sys.path; check the name, or run from the folder that holds it")


def _locations(spec: Any) -> list[str]:
    """A package's folders. A namespace package's list recomputes itself from its parent in
    sys.modules, which a search that imports nothing does not have: then its folders as found."""
    locations = spec.submodule_search_locations
    try:
        return list(locations)
    except (KeyError, AttributeError):
        return list(getattr(locations, "_path", []))


def _found_by_importing_parents(name: str) -> bool:
    """Ask a child interpreter, which imports the parent packages as `python -m` would. Only a clear
    "no such module" counts as not found; any other failure (or a slow import) leaves it to the ranks."""
    import subprocess
    import sys

    code = ("import importlib.util, sys\n"
            "try:\n    found = importlib.util.find_spec(sys.argv[1]) is not None\n"
            "except ModuleNotFoundError:\n    found = False\n"
            "except BaseException:\n    found = True\n"
            "sys.exit(0 if found else 1)")
    try:
        proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return True
    return proc.returncode != 1
