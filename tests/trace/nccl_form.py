"""NCCL-form Flight Recorder dumps made from real gloo ones, for machines without a GPU.

What differs in an NCCL job's dump, per torch's own analyzer (torch/distributed/flight_recorder/
components/builder.py and types.py): the group configuration is keyed by the group's name ("0"
for the default group, described "default_pg"), each entry's `profiling_name` says `nccl:`, and
the watchdog advances `state` from scheduled to started to completed. The tests check the result
against that analyzer where torch is installed."""

from __future__ import annotations

import pickle
from pathlib import Path


def to_nccl(gloo_dump: bytes, last_state: str = "completed") -> dict:
    """The dump as NCCL writes it: every call completed, except the last, which is `last_state`."""
    dump = pickle.loads(gloo_dump)
    ranks = next(iter(dump["pg_config"].values()))["ranks"]
    dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}}
    dump["pg_status"] = {"0": dump["pg_status"].get("0", {})}
    entries = dump["entries"]
    for i, entry in enumerate(entries):
        entry["profiling_name"] = "nccl:" + entry["profiling_name"].split(":", 1)[1]
        entry["state"] = last_state if i == len(entries) - 1 else "completed"
        entry["process_group"] = ("0", "default_pg")
        entry.setdefault("time_discovered_started_ns", None)
        entry.setdefault("time_discovered_completed_ns", None)
    dump["comm_lib_version"] = "2.21.5"
    return dump


def write_set(source: Path, target: Path, states: dict[int, str]) -> list[Path]:
    """Every rank_<r> in `source`, NCCL-form, its last call in `states[r]` (default completed)."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(source.glob("rank_[0-9]*")):
        if path.suffix:
            continue
        rank = int(path.name.split("_")[1])
        out = target / path.name
        out.write_bytes(pickle.dumps(to_nccl(path.read_bytes(), states.get(rank, "completed"))))
        written.append(out)
    return written
