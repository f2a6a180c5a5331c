"""The gradient/parameter fingerprint: equal for equal bytes whatever the tensor's layout, different
for every kind of change a rank-local fault makes, and without side effects. Quick: one process."""

from __future__ import annotations

import pytest
import torch

from ddpcheck.run.rank.fingerprint import NONE, OPAQUE, fingerprints


def _fp(t: torch.Tensor) -> tuple[int, int]:
    return fingerprints([t])[0]


TENSORS = [
    torch.randn(1000, 33),  # whole 256-byte runs and trailing words
    torch.randn(4097),  # an odd number of float32: a trailing half word
    torch.randn(7).half(),  # only trailing bytes
    torch.randn(64, 130).double(),
    torch.randn(3, 3).bfloat16(),
    torch.arange(10),
]


@pytest.mark.parametrize("t", TENSORS, ids=lambda t: f"{t.dtype}{list(t.shape)}")
def test_equal_bytes_equal_fingerprints_and_any_flipped_bit_changes_them(t):
    assert _fp(t.clone()) == _fp(t)
    raw = t.view(-1).view(torch.uint8)
    generator = torch.Generator().manual_seed(1)
    for position in {0, raw.numel() - 1, *torch.randint(0, raw.numel(), (20,), generator=generator).tolist()}:
        for bit in (0, 7):
            flipped = t.clone()
            flipped.view(-1).view(torch.uint8)[position] ^= 1 << bit
            assert _fp(flipped) != _fp(t), (position, bit)


def test_moving_values_changes_the_fingerprint():
    t = torch.randn(256, 256)
    swapped = t.clone()
    swapped[0, 0], swapped[200, 100] = t[200, 100], t[0, 0]  # far apart
    assert _fp(swapped) != _fp(t)
    assert _fp(t.t().contiguous()) != _fp(t)  # a transposed square matrix
    rolled = torch.roll(t.view(-1), 64).view(256, 256)
    assert _fp(rolled) != _fp(t)
    bias = torch.randn(10)  # fewer than 32 words: every position weighs differently
    assert _fp(bias.flip(0)) != _fp(bias)


def test_layout_does_not_matter_but_dtype_and_shape_do():
    t = torch.randn(40, 70)
    assert _fp(t.t()) == _fp(t.t().contiguous())  # a non-contiguous view reads the same values
    assert _fp(t.view(70, 40)) != _fp(t)  # same bytes, another shape
    assert _fp(t.view(torch.int32)) != _fp(t)  # same bytes, another dtype


def test_none_and_unreadable_tensors_have_their_own_values_and_nothing_else_changes():
    params = [torch.nn.Parameter(torch.randn(33, 65)), None, torch.randn(4, 4).to_sparse()]
    before = params[0].detach().clone()
    rng = torch.get_rng_state()
    got = fingerprints(params)
    assert got[1] == (NONE, NONE) and got[2] == (OPAQUE, OPAQUE)
    assert got[0] == _fp(before) and torch.equal(params[0].detach(), before)
    assert torch.equal(torch.get_rng_state(), rng)  # the script's random state is untouched


def _by_definition(t: torch.Tensor) -> tuple[int, int]:
    """S and W as the module docstring defines them, word by word in Python."""
    from ddpcheck.run.rank.fingerprint import BLOCK, _header, _row_weights, column_weights

    raw = bytes(t.contiguous().view(-1).view(torch.uint8).tolist())
    whole = len(raw) // 8
    words = [int.from_bytes(raw[8 * i: 8 * i + 8], "little", signed=True) for i in range(whole)]
    rest = int.from_bytes(raw[8 * whole:], "little")
    rows = whole // BLOCK
    a = _row_weights(rows, torch.device("cpu")).tolist() if rows else []
    b = column_weights()
    s = _header(t.dtype, t.shape) + sum(words) + rest
    w = sum(a[i // BLOCK] * v for i, v in enumerate(words[: rows * BLOCK]))
    w += sum(x * y for x, y in zip(b, words[rows * BLOCK:])) + b[BLOCK] * rest
    mask = (1 << 64) - 1

    def signed(v: int) -> int:
        v &= mask
        return v - (1 << 64) if v >= 1 << 63 else v

    return signed(s), signed(w)


def test_a_model_read_in_one_call_gives_each_tensor_its_own_fingerprint():
    # Many biases and norms (read together in groups) between layers (read one by one), as in a
    # transformer, with empty, odd-sized and unaligned tensors among them.
    generator = torch.Generator().manual_seed(2)
    tensors = []
    for size in (0, 1, 5, 31, 32, 33, 100, 128, 700, 1000, 1024, 2047, 2048, 2049, 3000, 40_000):
        tensors.append(torch.randn(size, generator=generator))
        tensors.append(torch.randn(size + 1, generator=generator).half()[1:])
    tensors += [torch.randn(256, 256, generator=generator)] + [torch.randn(256, generator=generator)] * 40
    together = fingerprints(tensors)
    assert together == [fingerprints([t])[0] for t in tensors]
    assert together == [_by_definition(t) for t in tensors]
