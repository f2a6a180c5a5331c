"""A rank's live state in a memory-mapped file, `<record_dir>/live-rank-<R>.bin`. Torch-free.

The rank record (JSON) is rewritten at checked steps and epoch ends; a rank that torchrun kills,
or that gloo aborts, never writes its last moments there. This file is written in place as the
rank goes — counters, the collective it is in, its last few collectives — with plain stores into a
shared mapping, which the kernel keeps when the process dies, whatever kills it. The launcher
reads it after the job to tell what each rank was doing when the job broke.

Layout: 16 little-endian int64 counters (see INTS), one 512-byte JSON slot for the current data
loader pass, then RING slots of SLOT bytes, each the JSON of one `calls.Call` (seq modulo RING)
ended by a newline.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Any

from ddpcheck.run.calls import Call, CallLog

VERSION = 1
INTS = ("entered", "hash", "in_call", "version", "pid", "steps", "forwards", "backwards",
        "pass_serial", "pass_batches", "pass_steps0", "pass_forwards0", "pass_ended",
        "progress_ms", "ours", "spare")  # the first three are written together on every call
_INDEX = {name: i for i, name in enumerate(INTS)}
PASS_SLOT = 512
RING = 32
SLOT = 384
_HEAD = 8 * len(INTS)
SIZE = _HEAD + PASS_SLOT + RING * SLOT
_INT = struct.Struct("<q")
_CALL = struct.Struct("<qqq")  # entered, hash, in_call
_ENCODED_MAX = 4096  # distinct (op, sig, site, group) encodings kept


def path_for(record_dir: str, rank: int) -> str:
    return os.path.join(record_dir, f"live-rank-{rank}.bin")


class LiveFile:
    """The writer, in the rank. Every method is a few stores into the mapping (no syscalls)."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self.map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.map[_HEAD:SIZE] = b" " * (SIZE - _HEAD)
        self.encoded: dict[tuple[str, str, str | None, str], tuple[str, str]] = {}
        self.set("version", VERSION)
        self.set("pid", os.getpid())

    def set(self, name: str, value: int) -> None:
        _INT.pack_into(self.map, 8 * _INDEX[name], value)

    def set_pass(self, data: dict[str, Any]) -> None:
        self._slot(_HEAD, PASS_SLOT, json.dumps(data).encode())

    def set_call(self, entered: int, hash_: int, in_call: int) -> None:
        _CALL.pack_into(self.map, 0, entered, hash_, in_call)

    def put_call(self, call: Call) -> None:
        """The call's JSON in its ring slot; the parts that repeat are encoded once."""
        key = (call.op, call.sig, call.site, call.group)
        parts = self.encoded.get(key)
        if parts is None:
            site = call.site
            if site is not None and len(site) > SLOT // 2:  # a very long path: the file name and line
                site = os.path.basename(site)
            parts = (json.dumps([call.op, call.sig, site]).strip("[]"), json.dumps(call.group))
            if len(self.encoded) < _ENCODED_MAX:
                self.encoded[key] = parts
        raw = f"[{call.seq}, {parts[0]}, {call.step}, {parts[1]}]\n".encode()
        offset = _HEAD + PASS_SLOT + (call.seq % RING) * SLOT
        self.map[offset:offset + len(raw)] = raw if len(raw) <= SLOT else raw[:SLOT]  # the reader stops at the newline

    def _slot(self, offset: int, size: int, raw: bytes) -> None:
        self.map[offset:offset + size] = raw.ljust(size)

    def close(self) -> None:
        try:
            self.map.flush()
            self.map.close()
        except (ValueError, OSError):
            pass


def read(path: str) -> dict[str, Any] | None:
    """The launcher's view of one live file: the counters, the current pass and the world group's
    CallLog; None when the file is missing or not ours."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SIZE)
    except OSError:
        return None
    if len(raw) < SIZE:
        return None
    ints = {name: _INT.unpack_from(raw, 8 * i)[0] for i, name in enumerate(INTS)}
    if ints["version"] != VERSION:
        return None
    calls = []
    for i in range(RING):
        text = raw[_HEAD + PASS_SLOT + i * SLOT:_HEAD + PASS_SLOT + (i + 1) * SLOT].split(b"\n", 1)[0].strip()
        if text:
            try:
                calls.append(Call.from_json(json.loads(text)))
            except (ValueError, TypeError):
                continue
    entered = ints["entered"]
    recent = tuple(sorted((c for c in calls if entered - RING < c.seq <= entered), key=lambda c: c.seq))
    # A torn write can leave a gap; only an unbroken run up to the last call is trusted.
    unbroken: list[Call] = []
    for call in reversed(recent):
        if unbroken and call.seq != unbroken[-1].seq - 1:
            break
        unbroken.append(call)
    recent = tuple(reversed(unbroken))
    current = next((c for c in recent if c.seq == ints["in_call"]), None) if ints["in_call"] else None
    try:
        pass_ = json.loads(raw[_HEAD:_HEAD + PASS_SLOT].strip() or b"null")
    except ValueError:
        pass_ = None
    return {**ints, "pass": pass_, "log": CallLog(entered, recent, current)}
