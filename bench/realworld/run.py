"""Public DDP scripts under `ddpcheck run`: does each run on a CPU machine, with the verdict a user
should get?

    python bench/realworld/run.py MIRRORS.json [--only NAME ...] [--keep DIR] [--list]

MIRRORS.json maps "owner/name" to a local git directory of that repository (a bare clone or a
snapshot). For every entry of run_scripts.json (beside this file) the harness

1. exports the entry's files at its commit from that git directory into a fresh temporary tree
   (nothing of the repository is stored in this project),
2. writes the tiny data the entry asks for (token shards, images), generated from a fixed seed,
3. runs `python -m ddpcheck run --report R.json --nproc N SCRIPT ARGS...` from the entry's working
   directory, exactly as a user would type it, and
4. compares what ddpcheck said (its exit code, the finding codes, the status of named checks, the
   file:line of named findings) with what the entry expects.

It prints one line per script, expected vs got and the wall time, then a total. Exit status: 0 when
every script got what it expects, 1 when one differed, 2 when one could not be run at all (no
mirror, a missing Python package, a bad entry).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCRIPTS = HERE / "run_scripts.json"
DEFAULT_TIMEOUT_S = 300


@dataclass
class Outcome:
    """What ddpcheck said about one script, reduced to what the entries can expect."""

    exit: int | None
    findings: list[str]
    statuses: dict[str, str]
    locations: dict[str, str]
    wall_s: float
    tail: str = ""
    timed_out: bool = False


@dataclass
class Verdict:
    name: str
    state: str  # "ok", "differs", "skipped"
    outcome: Outcome | None = None
    differences: list[str] = field(default_factory=list)
    reason: str = ""


# --- data the scripts read -----------------------------------------------------------------


def _tokens(tree: Path, spec: dict[str, Any], seed: int) -> None:
    """Shards of random token ids (`path` may hold `{i}`), as nanoGPT-style loaders memmap them;
    `dtype` is the array type the loader reads (uint16 unless given); `"format": "npy"` writes
    NumPy's .npy files (with their header) for loaders that `np.load` them instead of raw bytes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    dtype = np.dtype(spec.get("dtype", "uint16"))
    for i in range(int(spec.get("files", 1))):
        target = tree / spec["path"].format(i=i)
        target.parent.mkdir(parents=True, exist_ok=True)
        ids = rng.integers(0, int(spec["vocab"]), size=int(spec["tokens"]), dtype=dtype)
        if spec.get("format") == "npy":
            with open(target, "wb") as out:  # np.save(path) would append ".npy" to other names
                np.save(out, ids)
        else:
            ids.tofile(target)


def _words(tree: Path, spec: dict[str, Any], seed: int) -> None:
    """A text file of `lines` lines of `words` random lower-case words drawn from a vocabulary
    of `vocab` distinct words. The vocabulary depends on `vocab` alone, so the train, validation
    and test files of one entry share it (a whitespace tokenizer built on one knows the others)."""
    import numpy as np

    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    spell = np.random.default_rng(int(spec["vocab"]))
    vocab = sorted({"".join(spell.choice(letters, size=6)) for _ in range(int(spec["vocab"]))})
    rng = np.random.default_rng(seed)
    target = tree / spec["path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    rows = (" ".join(vocab[j] for j in rng.integers(0, len(vocab), size=int(spec["words"])))
            for _ in range(int(spec["lines"])))
    target.write_text("\n".join(rows) + "\n", encoding="utf-8")


def _json(tree: Path, spec: dict[str, Any], seed: int) -> None:
    """A JSON file with the entry's literal `content` (a vocabulary, a dataset index)."""
    target = tree / spec["path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(spec["content"]), encoding="utf-8")


def _images(tree: Path, spec: dict[str, Any], seed: int) -> None:
    """A folder of small random RGB PNG images."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder = tree / spec["dir"]
    folder.mkdir(parents=True, exist_ok=True)
    size = int(spec["size"])
    for i in range(int(spec["count"])):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{i:05d}.png")


def _hdf5_tokens(tree: Path, spec: dict[str, Any], seed: int) -> None:
    """An HDF5 file holding one 1-D dataset (`dataset`, "tokens" unless given) of `tokens`
    random ids below `vocab`, as loaders that slice an h5py dataset read it."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(seed)
    target = tree / spec["path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(target, "w") as out:
        out.create_dataset(spec.get("dataset", "tokens"),
                           data=rng.integers(0, int(spec["vocab"]), size=int(spec["tokens"]), dtype=np.int64))


GENERATORS = {"tokens": _tokens, "images": _images, "words": _words, "json": _json, "hdf5_tokens": _hdf5_tokens}
GENERATOR_NEEDS = {"tokens": ["numpy"], "images": ["numpy", "PIL"], "words": ["numpy"], "hdf5_tokens": ["numpy", "h5py"]}


# --- one script ----------------------------------------------------------------------------


def missing_modules(entry: dict[str, Any]) -> list[str]:
    """What the entry needs and this environment lacks. A requirement is a module name, or a
    distribution with a version range (`wandb<0.19`) where the script uses an API that other
    versions reject: then an installed version outside the range is missing too."""
    needed = list(entry.get("requires", []))
    for spec in entry.get("data", []):
        needed += GENERATOR_NEEDS.get(spec.get("kind", ""), [])
    return sorted({m for m in map(_unmet, needed) if m})


def _unmet(requirement: str) -> str | None:
    from packaging.requirements import Requirement

    wanted = Requirement(requirement)
    if importlib.util.find_spec(wanted.name) is None:
        return requirement
    if not wanted.specifier:
        return None
    try:
        installed = importlib.metadata.version(wanted.name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return None if wanted.specifier.contains(installed, prereleases=True) else f"{requirement} (installed {installed})"


def export(git_dir: str, commit: str, paths: list[str], tree: Path) -> None:
    """The entry's files at `commit`, written under `tree` (git archive, read with tarfile)."""
    proc = subprocess.run(["git", "--git-dir", git_dir, "archive", "--format=tar", commit, "--", *paths],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace").strip() or "git archive failed")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as archive:
        archive.extractall(tree, filter="data")


def command(entry: dict[str, Any], report: Path) -> list[str]:
    target = ["-m", entry["module"]] if "module" in entry else [entry["script"]]
    return [sys.executable, "-m", "ddpcheck", "run", "--report", str(report),
            "--nproc", str(entry["nproc"]), *entry.get("ddpcheck_args", []), *target,
            *entry.get("args", [])]


def environment(entry: dict[str, Any], tree: Path) -> dict[str, str]:
    """The job's environment; `{tree}` in an entry's value is the exported tree. An entry's
    PYTHONPATH (a repository installed as a package, importable from its root) goes after this
    checkout, which stays first so that the harness measures the ddpcheck it sits in."""
    env = dict(os.environ)
    own = {k: None if v is None else str(v).replace("{tree}", str(tree)) for k, v in entry.get("env", {}).items()}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [own.pop("PYTHONPATH", None), env.get("PYTHONPATH")])])
    env.pop("OMP_NUM_THREADS", None)  # torchrun sets 1 per worker; more is far slower on 2 cores
    for key, value in own.items():  # null: the variable must not be set
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_ddpcheck(entry: dict[str, Any], tree: Path) -> Outcome:
    report = tree.parent / "report.json"
    cwd = tree / entry.get("cwd", ".")
    started = time.monotonic()
    proc = subprocess.Popen(command(entry, report), cwd=cwd, env=environment(entry, tree),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=float(entry.get("timeout_s", DEFAULT_TIMEOUT_S)))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        output, _ = proc.communicate()
    finally:
        _kill_group(proc.pid)  # nothing of the job outlives its line
    wall = time.monotonic() - started
    data: dict[str, Any] = {}
    if report.exists():
        try:
            data = json.loads(report.read_text())
        except ValueError:
            data = {}
    findings = sorted({f["code"] for f in data.get("findings", [])})
    statuses = {c["code"]: c["status"] for c in data.get("run", data).get("checks", [])}
    locations = {}
    for f in data.get("findings", []):
        path, line = f.get("path"), (f.get("location") or {}).get("line")
        if path and line and f["code"] not in locations:
            rel = os.path.relpath(path, tree) if os.path.isabs(path) else path
            locations[f["code"]] = f"{rel}:{line}"
    return Outcome(None if timed_out else proc.returncode, findings, statuses, locations, wall,
                   tail="\n".join(output.splitlines()[-25:]), timed_out=timed_out)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def compare(expect: dict[str, Any], got: Outcome) -> list[str]:
    """What differs between the entry's expectation and ddpcheck's answer (empty: as expected)."""
    out = []
    if got.timed_out:
        return ["timed out"]
    if "exit" in expect and got.exit != expect["exit"]:
        out.append(f"exit {got.exit}, expected {expect['exit']}")
    if "findings" in expect:
        want = set(expect["findings"])
        tolerated = set(expect.get("may", []))  # what a loaded machine or a race in the script may or may not show
        extra, missing = sorted(set(got.findings) - want - tolerated), sorted(want - set(got.findings))
        if extra:
            out.append("unexpected " + ", ".join(extra))
        if missing:
            out.append("missing " + ", ".join(missing))
    for code, status in sorted(expect.get("statuses", {}).items()):
        if got.statuses.get(code) != status:
            out.append(f"{code} {got.statuses.get(code, 'absent')}, expected {status}")
    for code, where in sorted(expect.get("locations", {}).items()):
        # A list: the places a race in the script decides between, each a right answer.
        places = [where] if isinstance(where, str) else list(where)
        if code in got.locations and got.locations[code] not in places:
            out.append(f"{code} at {got.locations[code]}, expected {' or '.join(places)}")
    return out


def run_entry(entry: dict[str, Any], mirrors: dict[str, str], keep: Path | None) -> Verdict:
    name = entry["name"]
    git_dir = mirrors.get(entry["repo"])
    if not git_dir or not os.path.isdir(git_dir):
        return Verdict(name, "skipped", reason=f"no git directory for {entry['repo']} in the mirrors file")
    missing = missing_modules(entry)
    if missing:
        return Verdict(name, "skipped", reason="needs Python packages: " + ", ".join(missing)
                       + " (see `pip` in run_scripts.json)")
    work = Path(tempfile.mkdtemp(prefix=f"ddpcheck-real-{name}-"))
    try:
        tree = work / "tree"
        tree.mkdir()
        try:
            export(git_dir, entry["commit"], entry["files"], tree)
        except (RuntimeError, tarfile.TarError) as exc:
            return Verdict(name, "skipped", reason=f"export of {entry['repo']}@{entry['commit'][:12]} failed: {exc}")
        for i, spec in enumerate(entry.get("data", [])):
            GENERATORS[spec["kind"]](tree, spec, seed=i)
        got = run_ddpcheck(entry, tree)
        differences = compare(entry["expect"], got)
        return Verdict(name, "differs" if differences else "ok", got, differences)
    finally:
        if keep is not None:
            shutil.copytree(work, keep / name, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)


# --- output --------------------------------------------------------------------------------


def describe(exit_code: int | None, findings: list[str]) -> str:
    codes = ",".join(findings) if findings else "none"
    return f"exit {exit_code if exit_code is not None else '-'} [{codes}]"


def line(entry: dict[str, Any], verdict: Verdict) -> str:
    expect = entry["expect"]
    wanted = describe(expect.get("exit"), sorted(expect.get("findings", [])))
    if verdict.state == "skipped":
        return f"{entry['name']:<26} SKIP     expected {wanted:<34} {verdict.reason}"
    got = verdict.outcome
    assert got is not None
    mark = "ok" if verdict.state == "ok" else "DIFFERS"
    text = (f"{entry['name']:<26} {mark:<8} expected {wanted:<34} got {describe(got.exit, got.findings):<34} "
            f"{got.wall_s:6.1f} s")
    if verdict.differences:
        text += "\n" + "\n".join(f"{'':<27}- {d}" for d in verdict.differences)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", help='JSON file: {"owner/name": "/path/to/git/dir", ...}')
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this entry (repeatable)")
    parser.add_argument("--keep", metavar="DIR", help="copy each exported tree and its report.json here")
    parser.add_argument("--list", action="store_true", help="list the entries and their commands, run nothing")
    parser.add_argument("--verbose", action="store_true", help="print the last lines of ddpcheck's output for entries that differ")
    args = parser.parse_args(argv)

    entries = json.loads(SCRIPTS.read_text())["scripts"]
    unknown = sorted(set(args.only) - {e["name"] for e in entries})
    if unknown:
        print(f"run.py: no entry named {', '.join(unknown)} in {SCRIPTS.name}", file=sys.stderr)
        return 2
    entries = [e for e in entries if not args.only or e["name"] in args.only]
    if args.list:
        for e in entries:
            print(f"{e['name']}: {e['repo']}@{e['commit'][:12]} ({e.get('cwd', '.')})\n  "
                  + " ".join(command(e, Path("report.json"))[1:]))
        return 0
    try:
        mirrors = json.loads(Path(args.mirrors).read_text())
    except (OSError, ValueError) as exc:
        print(f"run.py: cannot read the mirrors file {args.mirrors}: {exc}", file=sys.stderr)
        return 2
    keep = Path(args.keep).resolve() if args.keep else None

    verdicts = []
    for entry in entries:
        verdict = run_entry(entry, mirrors, keep)
        verdicts.append(verdict)
        print(line(entry, verdict), flush=True)
        if args.verbose and verdict.state == "differs" and verdict.outcome is not None:
            print("\n".join("    | " + t for t in verdict.outcome.tail.splitlines()), flush=True)
    ok = sum(v.state == "ok" for v in verdicts)
    differ = sum(v.state == "differs" for v in verdicts)
    skipped = sum(v.state == "skipped" for v in verdicts)
    wall = sum(v.outcome.wall_s for v in verdicts if v.outcome is not None)
    print(f"{ok} as expected, {differ} differ, {skipped} skipped ({wall:.0f} s of ddpcheck runs)")
    return 2 if skipped else (1 if differ else 0)


if __name__ == "__main__":
    sys.exit(main())
