"""Exact fingerprints of tensors, computed where the tensors live. Reads only: no copy of a
contiguous tensor, no global RNG, no tensor changed.

A tensor's bytes are read as 64-bit words v_0 ... v_{N-1} (its last 1–7 bytes, if any, as one more
word, v_N) and reduced with wrap-around (mod 2^64) to two numbers:

    S = H + sum_i v_i                  (H: a hash of the dtype and shape)
    W = sum_i w_i * v_i                w_i = a_{i div 32} for the words in whole rows of 32,
                                       w_i = b_{i mod 32} for the < 32 words after them

with fixed pseudo-random 64-bit weights a (one per row) and b, the same on every rank. On the
tensor's own device that is one vectorised integer reduction over the tensor (the words viewed
as an (N/32, 32) matrix, summed along its rows) and one dot product of the row sums with a; only
two numbers per tensor (and its < 32 trailing words) leave the device. It reads the tensor once,
at about the speed of `torch.sum`. The collision argument is on the page of DDP105
(checks/grads.py).
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import torch

NONE = -1  # the fingerprint of a missing tensor (e.g. a gradient that is None)
OPAQUE = -2  # a tensor whose bytes cannot be read (sparse, meta, ...)
BLOCK = 32  # words per row (256 bytes)
_SEED = 0x5EED_DDC4  # the weights are the same on every rank and in every run
_MASK = (1 << 64) - 1


@lru_cache(maxsize=64)
def _row_weights(rows: int, device: torch.device) -> torch.Tensor:
    import torch

    gen = torch.Generator().manual_seed(_SEED + rows)
    weights = torch.randint(-(2**63), 2**63 - 1, (rows,), dtype=torch.int64, generator=gen)
    return weights.to(device)


@lru_cache(maxsize=64)
def _both_weights(rows: int) -> torch.Tensor:
    """The (2, rows) matrix [1; a] on the CPU: both row-weighted sums in one product (the fixed
    cost of a small reduction, not the reading, dominates at the sizes of a model's layers)."""
    import torch

    weights = _row_weights(rows, torch.device("cpu"))
    return torch.stack((torch.ones_like(weights), weights))


@lru_cache(maxsize=1)
def column_weights() -> tuple[int, ...]:
    """b_0 .. b_31, and the weight of the trailing partial word."""
    import torch

    gen = torch.Generator().manual_seed(_SEED)
    return tuple(torch.randint(-(2**63), 2**63 - 1, (BLOCK + 1,), dtype=torch.int64, generator=gen).tolist())


@lru_cache(maxsize=1024)
def _header(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return zlib.crc32(f"{dtype}{shape}".encode()) * 0x9E3779B97F4A7C15


def _signed(value: int) -> int:
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


class _Plan:
    """Where one readable tensor's values are on the host: two scalars (sum of its row sums, row
    sums @ a) when it has whole rows, its < 32 trailing words, and its last 1–7 bytes."""

    __slots__ = ("index", "rows", "tail", "rest", "header")

    def __init__(self, index: int, rows: bool, tail: int, rest: int, header: int) -> None:
        self.index, self.rows, self.tail, self.rest, self.header = index, rows, tail, rest, header


def _words(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The tensor's whole 64-bit words (a view when it can be), and its last 1-7 bytes."""
    import torch

    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    if t.is_contiguous() and t.dim() and t.shape[-1] * t.element_size() % 8 == 0:
        try:
            return t.view(torch.int64), 0  # the usual case: no copy, no reshape
        except RuntimeError:  # storage not 8-byte aligned (a view into a larger buffer)
            pass
    flat = t.reshape(-1)
    if flat.numel() * flat.element_size() % 8 == 0:
        try:
            return flat.view(torch.int64), 0
        except RuntimeError:
            return flat.clone().view(torch.int64), 0
    raw = flat.contiguous().view(torch.uint8)
    whole = raw.numel() // 8 * 8
    rest = int.from_bytes(bytes(raw[whole:].tolist()), "little")
    head = raw[:whole]
    try:
        return head.view(torch.int64), rest
    except RuntimeError:
        return head.clone().view(torch.int64), rest


def _parts(t: torch.Tensor, device: torch.device, index: int, scalars: list[torch.Tensor], tails: list[torch.Tensor]) -> _Plan | None:
    """Queue what to send for `t`; None if `t` cannot be read."""
    import torch

    if device.type == "meta" or t.layout is not torch.strided:
        return None
    words, rest = _words(t)
    n_words = words.numel()
    n_rows = n_words // BLOCK
    tail = n_words - n_rows * BLOCK
    if n_rows:
        if tail:
            words = words.reshape(-1)
            matrix = words[: n_rows * BLOCK].view(n_rows, BLOCK)
        else:
            matrix = words.view(n_rows, BLOCK)
        rows = matrix.sum(1)
        if device.type == "cpu":  # one product for both numbers: [1; a] @ rows
            scalars.append(torch.mv(_both_weights(n_rows), rows))
        else:  # integer matrix products and dot are CPU-only; an elementwise product and a sum are not
            scalars.append(torch.stack((rows.sum(), rows.mul(_row_weights(n_rows, device)).sum())))
    if tail:
        tails.append(words.reshape(-1)[n_rows * BLOCK:])
    return _Plan(index, bool(n_rows), tail, rest, _header(t.dtype, t.shape))


def fingerprints(tensors: Iterable[torch.Tensor | None]) -> list[tuple[int, int]]:
    """(S, W) per tensor, in order: (NONE, NONE) for None, (OPAQUE, OPAQUE) for unreadable ones.
    One pass over each tensor where it lives, and one transfer to the host per device."""
    import torch

    items = list(tensors)
    out: list[tuple[int, int]] = [(NONE, NONE)] * len(items)
    by_device: dict[torch.device, tuple[list[_Plan], list[torch.Tensor], list[torch.Tensor]]] = {}
    with torch.no_grad():
        for i, t in enumerate(items):
            if t is None:
                continue
            device = t.device  # (a new object at each access)
            plans, scalars, tails = by_device.setdefault(device, ([], [], []))
            marks = len(scalars), len(tails)
            try:
                plan = _parts(t, device, i, scalars, tails)
            except (RuntimeError, TypeError):
                del scalars[marks[0]:], tails[marks[1]:]
                plan = None
            if plan is None:
                out[i] = (OPAQUE, OPAQUE)
            else:
                plans.append(plan)
        for plans, scalars, tails in by_device.values():
            pieces = scalars + tails
            values = (torch.cat(pieces) if len(pieces) > 1 else pieces[0]).tolist() if pieces else []
            b = column_weights()
            s_at, t_at = 0, 2 * len(scalars)  # two numbers per matrix
            for plan in plans:
                s = plan.header + plan.rest
                w = b[BLOCK] * plan.rest
                if plan.rows:
                    s += values[s_at]
                    w += values[s_at + 1]
                    s_at += 2
                if plan.tail:
                    words = values[t_at: t_at + plan.tail]
                    s += sum(words)
                    w += sum(x * y for x, y in zip(b, words))
                    t_at += plan.tail
                out[plan.index] = (_signed(s), _signed(w))
    return out


def combine(pairs: Iterable[tuple[int, int]]) -> int:
    """One digest for a sequence of fingerprints (order matters), as a signed 64-bit int."""
    acc = 0
    for k, (s, w) in enumerate(pairs, 1):
        acc = (acc * 0x100000001B3 + (s & _MASK) * (2 * k + 1) + ((w & _MASK) ^ (k << 32))) & _MASK
    return _signed(acc)


def tensor_digest(t: torch.Tensor | None) -> int:
    """One tensor's fingerprint as one number."""
    return combine(fingerprints([t]))


def structure_digest(obj: object) -> int | None:
    """Digest of every tensor inside nested args (tuples, lists, dicts); None if there is none."""
    import torch

    found: list[torch.Tensor] = []

    def walk(o: object, depth: int) -> None:
        if depth > 6:
            return
        if isinstance(o, torch.Tensor):
            found.append(o)
        elif isinstance(o, (list, tuple)):
            for item in o:
                walk(item, depth + 1)
        elif isinstance(o, dict):
            for key in sorted(o, key=str):
                walk(o[key], depth + 1)

    walk(obj, 0)
    return combine(fingerprints(found)) if found else None
