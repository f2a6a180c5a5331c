"""PyTorch's Flight Recorder for the job `ddpcheck run` launches: turned on in the launcher's
environment (the ranks inherit it), and written by each rank when ddpcheck stops a hung job —
gloo, unlike NCCL's watchdog, writes no dump by itself. The files are what NCCL writes on a
timeout (`TORCH_FR_DUMP_TEMP_FILE<rank>`), so `ddpcheck trace` reads them either way."""

from __future__ import annotations

import os
import tempfile

BUFFER_VARIABLE = "TORCH_FR_BUFFER_SIZE"
DUMP_VARIABLE = "TORCH_FR_DUMP_TEMP_FILE"
# The names torch read before these (2.4-era releases; later ones still read them as fallbacks):
# a user who set one of them has chosen, and ddpcheck does not override it.
OLD_BUFFER_VARIABLE = "TORCH_NCCL_TRACE_BUFFER_SIZE"
OLD_DUMP_VARIABLE = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
DEFAULT_BUFFER = "2000"  # entries per rank and group: NCCL's default, a few hundred KB per rank
PREFIX = "rank_"


def _dump_prefix() -> str | None:
    """Where the user's (or ddpcheck's) settings send the dumps: a path prefix the rank is added to."""
    return os.environ.get(DUMP_VARIABLE) or os.environ.get(OLD_DUMP_VARIABLE) or None


def environment() -> tuple[dict[str, str], str | None]:
    """The variables to set for the job (the user's own settings win), and the folder ddpcheck
    made for the dumps (None when the user chose where they go)."""
    env: dict[str, str] = {}
    if BUFFER_VARIABLE not in os.environ and OLD_BUFFER_VARIABLE not in os.environ:
        env[BUFFER_VARIABLE] = DEFAULT_BUFFER
    if _dump_prefix():
        return env, None
    folder = tempfile.mkdtemp(prefix="ddpcheck-flight-recorder-")
    env[DUMP_VARIABLE] = os.path.join(folder, PREFIX)
    return env, folder


def dump_folder() -> str | None:
    prefix = _dump_prefix()
    return os.path.dirname(prefix) if prefix else None


def written(folder: str | None) -> list[str]:
    if not folder or not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if not n.endswith(".tmp"))


def write_rank_dump(rank: int) -> str | None:
    """In a rank: write its Flight Recorder dump where NCCL would; None when off or it failed.
    Called from ddpcheck's watchdog thread while the training thread is blocked in a collective;
    the recorder's buffer is read under its own lock."""
    prefix = _dump_prefix()
    size = os.environ.get(BUFFER_VARIABLE, os.environ.get(OLD_BUFFER_VARIABLE, "0"))
    if not prefix or size.strip() in ("", "0"):
        return None
    try:
        import torch

        # Private, and absent from torch's type stubs; present since the recorder came (2.4).
        dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace")
        data: bytes = dump(includeCollectives=True, includeStackTraces=True, onlyActive=False)
        path = f"{prefix}{rank}"
        with open(path + ".tmp", "wb") as out:
            out.write(data)
        os.replace(path + ".tmp", path)
        return path
    except Exception:  # noqa: BLE001 - an older torch, a recorder that is off: the hang verdict stands
        return None
