"""The per-rank record: what each rank writes (ddpcheck/run/rank/session.py) and the launcher reads
back after the job. Torch-free. Layout: REPORT.md, "Per-rank records".

Files in the run's record directory: `rank-<R>.json` per rank, and `hang.json` when the watchdog
decided the job hung.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

RECORD_VERSION = 1
HANG_VERDICT_FILE = "hang.json"

Record = dict[str, Any]


def record_path(record_dir: str, rank: int) -> str:
    return os.path.join(record_dir, f"rank-{rank}.json")


def load_records(record_dir: str) -> list[Record]:
    """Every rank's record that can be read, by rank; a torn or missing file is just absent."""
    out = []
    for path in glob.glob(os.path.join(record_dir, "rank-*.json")):
        try:
            with open(path) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda r: r.get("rank", 0))


def section(record: Record, name: str) -> dict[str, Any]:
    """A probe's part of one rank's record ({} when the probe recorded nothing there)."""
    value = record.get("probes", {}).get(name)
    return value if isinstance(value, dict) else {}


def node_of(record: Record) -> int:
    """The node (torchrun's GROUP_RANK) a rank ran on; 0 for a single-node job."""
    node = record.get("node", 0)
    return node if isinstance(node, int) else 0
