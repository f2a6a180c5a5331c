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
at about the speed of `torch.sum`. Tensors of at most SMALL words (biases, norms) are read
together instead: their words concatenated and multiplied once by a cached matrix that holds, per
tensor, a row of ones and a row of its weights w_i (the same S and W). The collision argument is on the page of DDP105
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


def _draw_weights(rows: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """a_0 .. a_{rows-1}, drawn afresh on the CPU (into `out` when given; callers cache what
    they keep)."""
    import torch

    gen = torch.Generator().manual_seed(_SEED + rows)
    if out is not None:
        return torch.randint(-(2**63), 2**63 - 1, (rows,), generator=gen, out=out)
    return torch.randint(-(2**63), 2**63 - 1, (rows,), dtype=torch.int64, generator=gen)


@lru_cache(maxsize=64)
def _row_weights(rows: int, device: torch.device) -> torch.Tensor:
    if device.type == "cpu":  # a view of the matrix below: the CPU keeps one copy of a, not two
        return _both_weights(rows)[1]
    return _draw_weights(rows).to(device)


@lru_cache(maxsize=64)
def _both_weights(rows: int) -> torch.Tensor:
    """The (2, rows) matrix [1; a] on the CPU: both row-weighted sums in one product (the fixed
    cost of a small reduction, not the reading, dominates at the sizes of a model's layers)."""
    import torch

    both = torch.empty((2, rows), dtype=torch.int64)  # filled in place: no temporary copies
    both[0].fill_(1)
    _draw_weights(rows, out=both[1])
    return both


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


# Tensors of at most SMALL words are read together: their words are concatenated and reduced by
# one product with a cached block matrix (a row of ones and a row of weights per tensor), so a
# model's many biases and norms cost two operations per group instead of four each. A group's
# matrix holds at most GROUP_CELLS numbers.
SMALL = 1024
GROUP_CELLS = 1 << 13
UNREAD = -2  # a plan's `at` when its tensor could not be read after all


@lru_cache(maxsize=64)
def _word_weights(n_words: int) -> torch.Tensor:
    """w_0 .. w_{n-1} of a tensor of n whole words, on the CPU (see the module docstring)."""
    import torch

    rows = n_words // BLOCK
    tail = torch.tensor(column_weights()[: n_words - rows * BLOCK], dtype=torch.int64)
    if not rows:
        return tail
    return torch.cat((_row_weights(rows, torch.device("cpu")).repeat_interleave(BLOCK), tail))


@lru_cache(maxsize=64)
def _group_weights(sizes: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The (2k, sum(sizes)) matrix that gives, for k concatenated tensors of these word counts,
    each one's sum of words and weighted sum: rows 2j and 2j+1 are 1 and w on tensor j, 0 elsewhere."""
    import torch

    matrix = torch.zeros(2 * len(sizes), sum(sizes), dtype=torch.int64)
    at = 0
    for j, n in enumerate(sizes):
        matrix[2 * j, at: at + n] = 1
        matrix[2 * j + 1, at: at + n] = _word_weights(n)
        at += n
    return matrix.to(device)


class _Plan:
    """Where one readable tensor's values are on the host: `at`, the first of its two numbers
    (sum of words, weighted sum) when it has words reduced on the device (-1 if none), its
    trailing words read on the host (`tail` of them, from `tail_at`), and its last 1-7 bytes."""

    __slots__ = ("index", "at", "tail", "tail_at", "rest", "header")

    def __init__(self, index: int, at: int, tail: int, tail_at: int, rest: int, header: int) -> None:
        self.index, self.at, self.tail, self.tail_at, self.rest, self.header = index, at, tail, tail_at, rest, header


def _words(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The tensor's whole 64-bit words, flat (a view when it can be), and its last 1-7 bytes."""
    import torch

    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    flat = t.view(-1) if t.is_contiguous() else t.reshape(-1)  # the usual case: no copy
    if flat.numel() * flat.element_size() % 8 == 0:
        try:
            return flat.view(torch.int64), 0
        except RuntimeError:  # storage not 8-byte aligned (a view into a larger buffer)
            return flat.clone().view(torch.int64), 0
    raw = flat.view(torch.uint8)
    whole = raw.numel() // 8 * 8
    rest = int.from_bytes(bytes(raw[whole:].tolist()), "little")
    head = raw[:whole]
    try:
        return head.view(torch.int64), rest
    except RuntimeError:
        return head.clone().view(torch.int64), rest


class _Device:
    """What one call reads on one device: the numbers to bring to the host, in order."""

    __slots__ = ("device", "cpu", "meta", "plans", "pieces", "count", "small", "tails")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu, self.meta = device.type == "cpu", device.type == "meta"
        self.plans: list[_Plan] = []
        self.pieces: list[torch.Tensor] = []  # each a 1-D int64 tensor of numbers
        self.count = 0  # numbers in `pieces` so far
        self.small: list[tuple[_Plan, torch.Tensor]] = []  # read together at the end
        self.tails: list[torch.Tensor] = []

    def add(self, t: torch.Tensor, index: int) -> None:
        """Queue what to bring to the host for `t`; raises (and queues nothing) if it cannot be read."""
        import torch

        if self.meta or t.layout is not torch.strided:
            raise TypeError("unreadable")
        words, rest = _words(t)
        n_words = words.numel()
        plan = _Plan(index, -1, 0, 0, rest, _header(t.dtype, t.shape))
        if n_words <= SMALL:
            if n_words:
                self.small.append((plan, words))
            self.plans.append(plan)
            return
        n_rows = n_words // BLOCK
        tail = n_words - n_rows * BLOCK
        rows = (words.narrow(0, 0, n_rows * BLOCK) if tail else words).view(n_rows, BLOCK).sum(1)
        if self.cpu:  # one product for both numbers: [1; a] @ rows
            both = torch.mv(_both_weights(n_rows), rows)
        else:  # integer matrix products are CPU-only; an elementwise product and a sum are not
            both = torch.stack((rows.sum(), rows.mul(_row_weights(n_rows, self.device)).sum()))
        if tail:
            plan.tail = tail
            self.tails.append(words.narrow(0, n_rows * BLOCK, tail))
        plan.at = self.count
        self.pieces.append(both)
        self.count += 2
        self.plans.append(plan)

    def read_small(self) -> None:
        """The small tensors, in groups of at most GROUP_CELLS weights: one product per group."""
        import torch

        group: list[tuple[_Plan, torch.Tensor]] = []
        width = 0
        for item in [*self.small, None]:
            n = 0 if item is None else item[1].numel()
            if group and (item is None or 2 * (len(group) + 1) * (width + n) > GROUP_CELLS):
                sizes = tuple(w.numel() for _, w in group)
                cat = torch.cat([w for _, w in group]) if len(group) > 1 else group[0][1]
                weights = _group_weights(sizes, self.device)
                if self.cpu:
                    sums = torch.mv(weights, cat)
                else:  # see `add`
                    sums = weights.mul(cat).sum(1)
                for j, (plan, _) in enumerate(group):
                    plan.at = self.count + 2 * j
                self.pieces.append(sums)
                self.count += 2 * len(group)
                group, width = [], 0
            if item is not None:
                group.append(item)
                width += n

    def values(self) -> list[int]:
        import torch

        tail_at = self.count
        for plan in self.plans:
            if plan.tail:
                plan.tail_at = tail_at
                tail_at += plan.tail
        pieces = self.pieces + self.tails
        if not pieces:
            return []
        return (torch.cat(pieces) if len(pieces) > 1 else pieces[0]).tolist()


def fingerprints(tensors: Iterable[torch.Tensor | None]) -> list[tuple[int, int]]:
    """(S, W) per tensor, in order: (NONE, NONE) for None, (OPAQUE, OPAQUE) for unreadable ones.
    One pass over each tensor where it lives, and one transfer to the host per device."""
    import torch

    items = list(tensors)
    out: list[tuple[int, int]] = [(NONE, NONE)] * len(items)
    by_device: dict[torch.device, _Device] = {}
    with torch.no_grad():
        for i, t in enumerate(items):
            if t is None:
                continue
            device = t.device  # (a new object at each access)
            reading = by_device.get(device)
            if reading is None:
                reading = by_device[device] = _Device(device)
            try:
                reading.add(t, i)
            except (RuntimeError, TypeError):
                out[i] = (OPAQUE, OPAQUE)
        b = column_weights()
        for reading in by_device.values():
            if reading.small:
                try:
                    reading.read_small()
                except (RuntimeError, TypeError):  # not expected: those tensors read as unreadable
                    for plan, _ in reading.small:
                        plan.at = UNREAD
            values = reading.values()
            for plan in reading.plans:
                if plan.at == UNREAD:
                    out[plan.index] = (OPAQUE, OPAQUE)
                    continue
                s = plan.header + plan.rest
                w = b[BLOCK] * plan.rest
                if plan.at >= 0:
                    s += values[plan.at]
                    w += values[plan.at + 1]
                if plan.tail:
                    words = values[plan.tail_at: plan.tail_at + plan.tail]
                    s += sum(words)
                    w += sum(x * y for x, y in zip(b, words))
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
