"""Read Flight Recorder dumps: the pickle that `_dump_fr_trace` writes (NCCL's watchdog writes it to
`TORCH_FR_DUMP_TEMP_FILE<rank>`) and the JSON form of `_dump_fr_trace_json`, as torch 2.4–2.13
write them. A dump is plain data (dicts, lists, strings, numbers, tuples), so the unpickler refuses
every class: a foreign or hostile pickle cannot run code here."""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Frames from these places are PyTorch's own (or the interpreter's, or the wrappers `ddpcheck run`
# puts around collectives), never the user's line.
_LIBRARY = re.compile(r"(site-packages|dist-packages)[/\\]|^<frozen |[/\\]lib[/\\]python3\.\d+[/\\]"
                      r"|[/\\]ddpcheck[/\\]run[/\\]")
_RANK = re.compile(r"(\d+)$")


class DumpError(Exception):
    """A file that is not a readable Flight Recorder dump; the message is one line."""


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str

    @property
    def user(self) -> bool:
        return not _LIBRARY.search(self.path)


@dataclass(slots=True)  # not frozen: a full 1,024-rank buffer makes two million of these
class Call:
    """One recorded collective of one rank."""

    seq: int  # collective_seq_id within its process group
    op: str  # "all_reduce", "barrier", ... (the backend prefix dropped)
    backend: str  # "nccl", "gloo", ... ("" when the dump does not say)
    input_sizes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    state: str  # "scheduled" | "started" | "completed"
    raw_frames: list[dict[str, Any]]  # as recorded; read into Frames only for the calls reported

    @property
    def frames(self) -> tuple[Frame, ...]:
        """Innermost first, as recorded."""
        return tuple(Frame(str(f.get("filename", "")), int(f.get("line", 0)), str(f.get("name", "")))
                     for f in self.raw_frames)

    def signature(self) -> tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]:
        """What every rank must pass alike for the call to pair up."""
        return (self.op, self.input_sizes, self.dtypes)

    def describe(self) -> str:
        if not self.input_sizes:
            return self.op
        shapes = ", ".join(f"{(self.dtypes[i].lower() if i < len(self.dtypes) else '')}"
                           f"[{', '.join(map(str, s))}]" for i, s in enumerate(self.input_sizes))
        return f"{self.op} {shapes}"

    def user_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if f.user)


@dataclass(frozen=True)
class Group:
    """A process group as one rank saw it."""

    key: str  # the group's name in the dump ("0" for the default group)
    description: str
    ranks: tuple[int, ...]  # global ranks, when the dump says


@dataclass(frozen=True)
class Dump:
    path: str
    rank: int
    version: str
    groups: dict[str, Group]
    calls: dict[str, tuple[Call, ...]]  # group key -> the rank's collectives, oldest first


class _PlainData(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # noqa: ANN401 — pickle's signature
        raise pickle.UnpicklingError(f"refers to {module}.{name}")


def read(path: str) -> Dump:
    """One rank's dump. Raises DumpError with a one-line reason."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise DumpError(f"cannot read: {err.strerror or err}") from None
    raw = _decode(data)
    if not isinstance(raw, dict) or "entries" not in raw or "version" not in raw:
        raise DumpError("not a Flight Recorder dump (no `version` and `entries`)")
    rank = _rank_of(path, raw)
    try:
        groups = _groups(raw.get("pg_config") or {})
        calls = _calls(raw["entries"])
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise DumpError(f"a Flight Recorder dump in a form ddpcheck does not know ({type(err).__name__}: {err})") from None
    for key in calls:
        groups.setdefault(key, Group(key, "", ()))
    return Dump(path, rank, str(raw["version"]), groups, calls)


def _decode(data: bytes) -> Any:  # noqa: ANN401 — plain data of any shape, checked by the caller
    if data[:1] in (b"{", b"[") or data[:3] == b"\xef\xbb\xbf":
        try:
            return json.loads(data.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError) as err:
            raise DumpError(f"not valid JSON ({err})") from None
    if data[:1] != b"\x80":
        raise DumpError("neither a pickle nor a JSON Flight Recorder dump")
    try:
        return _PlainData(io.BytesIO(data)).load()
    except pickle.UnpicklingError as err:
        raise DumpError(f"not a Flight Recorder dump ({err})") from None
    except (EOFError, ValueError, IndexError, OverflowError, MemoryError):
        raise DumpError("truncated or corrupt pickle (the rank may have died while writing it)") from None


def _rank_of(path: str, raw: dict[str, Any]) -> int:
    """The rank: PyTorch names each file `<prefix><rank>` (a `.json`/`.pkl` suffix allowed)."""
    stem = os.path.basename(path)
    for suffix in (".json", ".pkl", ".pickle"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    found = _RANK.search(stem)
    if found is None:
        if isinstance(raw.get("rank"), int):
            return int(raw["rank"])
        raise DumpError("cannot tell the rank: the file name does not end in it (PyTorch writes <prefix><rank>)")
    return int(found.group(1))


def _ranks(value: Any) -> tuple[int, ...]:  # noqa: ANN401
    if isinstance(value, str):  # "[0, 1, 2]" in every version seen
        value = json.loads(value) if value.strip() else []
    return tuple(int(r) for r in value)


def _groups(config: dict[str, Any]) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    for name, info in config.items():
        ranks = _ranks(info.get("ranks", [])) if isinstance(info, dict) else ()
        desc = str(info.get("desc", "")) if isinstance(info, dict) else ""
        groups[_group_key(str(name), desc)] = Group(_group_key(str(name), desc), desc, ranks)
    return groups


def _group_key(name: str, desc: str) -> str:
    # gloo's default group is configured under the name "" and recorded as ("0", "default_pg").
    return "0" if name == "" else name


def _sizes(sizes: Any) -> tuple[tuple[int, ...], ...]:  # noqa: ANN401
    """[[4, 8]] → ((4, 8),); a full buffer repeats a handful of shapes, so they are shared."""
    if not sizes:
        return ()
    key = repr(sizes)
    found = _SIZES.get(key)
    if found is None:
        found = _SIZES[key] = tuple(tuple(int(d) for d in s) for s in sizes)
    return found


_SIZES: dict[str, tuple[tuple[int, ...], ...]] = {}


def _calls(entries: list[dict[str, Any]]) -> dict[str, tuple[Call, ...]]:
    found: dict[str, list[Call]] = {}
    for entry in entries:
        if entry.get("is_p2p"):
            continue  # send/recv pair by their own sequence; not compared here
        seq = entry.get("collective_seq_id", entry.get("seq_id"))
        if seq is None:
            continue
        group = entry.get("process_group") or ("0", "default_pg")
        key = _group_key(str(group[0]), str(group[1]) if len(group) > 1 else "")
        backend, _, op = str(entry.get("profiling_name", "")).rpartition(":")
        found.setdefault(key, []).append(Call(
            seq=int(seq), op=op or "?", backend=backend,
            input_sizes=_sizes(entry.get("input_sizes")),
            dtypes=tuple(map(str, entry.get("input_dtypes") or ())),
            state=str(entry.get("state", "")), raw_frames=list(entry.get("frames") or ())))
    return {k: tuple(sorted(v, key=lambda c: c.seq)) for k, v in found.items()}


def discover(paths: list[str]) -> list[str]:
    """The files named, and the files in the directories named (not recursive; hidden skipped)."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, n) for n in os.listdir(path)
                            if not n.startswith(".") and os.path.isfile(os.path.join(path, n)))
        else:
            files.append(path)
    return files
