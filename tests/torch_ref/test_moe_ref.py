"""CPU tests of the routing references in kernelkiln.torch.moe."""

import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkiln.torch import normalize_weight, stable_topk, topk_gate_ref

PROPERTY = settings(max_examples=60, deadline=None, database=None)


def f32(v):
    return struct.unpack('<f', struct.pack('<f', v))[0]


def oracle_topk(row, k):
    """Larger score first; equal scores by smaller index."""
    return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]


def oracle_butterfly_sum(row):
    """Scalar model of a 32-lane shfl_xor reduction; each add is one fp32 rounding."""
    lanes = [f32(v) for v in row] + [0.0] * (32 - len(row))
    for offset in (16, 8, 4, 2, 1):
        lanes = [f32(lanes[i] + lanes[i ^ offset]) for i in range(32)]
    return lanes[0]


# ------------------------------------------------------------ top-k

def test_stable_topk_constructed_ties():
    scores = torch.tensor([
        [1.0, 3.0, 3.0, 2.0, 3.0, 0.0],
        [5.0, 5.0, 5.0, 5.0, 5.0, 5.0],
        [-1.0, -2.0, -1.0, -2.0, 0.0, -0.0],  # 0.0 and -0.0 compare equal: index 4 first
    ])
    idx = stable_topk(scores, 4)
    assert idx.dtype == torch.int64 and idx.is_contiguous()
    assert idx.tolist() == [[1, 2, 4, 3], [0, 1, 2, 3], [4, 5, 0, 2]]


@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), t=st.integers(1, 8), e=st.integers(1, 64),
       levels=st.integers(1, 6), data=st.data())
def test_stable_topk_matches_oracle_with_many_ties(seed, t, e, levels, data):
    k = data.draw(st.integers(1, e))
    gen = torch.Generator().manual_seed(seed)
    # Few distinct values force ties; the random offset keeps inputs non-trivial.
    scores = torch.randint(0, levels, (t, e), generator=gen).float() * 0.25 + torch.randn(1, generator=gen)
    idx = stable_topk(scores, k)
    assert idx.tolist() == [oracle_topk(row, k) for row in scores.tolist()]
    if k <= 32:
        assert torch.equal(topk_gate_ref(scores, k), idx)


@pytest.mark.parametrize('bad', [float('nan'), float('inf'), float('-inf')])
def test_topk_gate_ref_rejects_non_finite(bad):
    scores = torch.randn(3, 16)
    scores[1, 5] = bad
    with pytest.raises(ValueError, match='finite'):
        topk_gate_ref(scores, 4)


@pytest.mark.parametrize('call, exc, words', [
    (lambda: stable_topk(torch.randn(2, 8), 0), ValueError, 'k'),
    (lambda: stable_topk(torch.randn(2, 8), 9), ValueError, 'k'),
    (lambda: stable_topk(torch.randn(8), 2), ValueError, '2-D'),
    (lambda: stable_topk(torch.arange(8).reshape(1, 8), 2), TypeError, 'scores'),
    (lambda: topk_gate_ref(torch.randn(2, 64), 33), ValueError, 'num_topk'),
    (lambda: normalize_weight(torch.rand(2, 33)), ValueError, 'K'),
    (lambda: normalize_weight(torch.rand(2, 8).double()), TypeError, 'float32'),
])
def test_argument_validation(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


# ------------------------------------------------------------ normalize_weight

@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), t=st.integers(1, 6), k=st.integers(1, 32),
       log2_spread=st.integers(0, 30))
def test_normalize_weight_matches_butterfly_oracle(seed, t, k, log2_spread):
    gen = torch.Generator().manual_seed(seed)
    # Wide magnitude spread makes the fp32 sum order visible in the result bits.
    w = torch.rand(t, k, generator=gen) * torch.exp2(-log2_spread * torch.rand(t, k, generator=gen))
    denom, normalized = normalize_weight(w)
    want = [f32(oracle_butterfly_sum(row) + f32(1e-20)) for row in w.tolist()]
    assert denom.tolist() == want
    assert torch.equal(normalized, w / denom[:, None])


def test_normalize_weight_uses_butterfly_not_sequential_order():
    # Butterfly pairs lanes 0 and 2 first: (2^-24 + 2^-24) + 1 = 1 + 2^-23 exactly,
    # whereas a left-to-right sum loses both tiny terms to round-half-even.
    w = torch.tensor([[2.0**-24, 1.0, 2.0**-24]])
    denom, normalized = normalize_weight(w)
    assert denom.item() == 1.0 + 2.0**-23
    assert (w[0, 0] + w[0, 1] + w[0, 2]).item() == 1.0
    assert normalized[0, 1].item() == (torch.tensor(1.0) / torch.tensor(1.0 + 2.0**-23)).item()


def test_normalize_weight_zero_row_divides_by_eps():
    w = torch.tensor([[0.0, 0.0], [0.5, 0.25]])
    denom, normalized = normalize_weight(w)
    assert denom[0].item() == f32(1e-20) and normalized[0].tolist() == [0.0, 0.0]
    assert normalized[1].tolist() == [f32(0.5 / 0.75), f32(0.25 / 0.75)]
