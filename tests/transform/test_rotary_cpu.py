"""apply_rotary on the CPU: every bad argument gets a clear error (checked before the device), and the references
agree with each other and with the exact rotation."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkiln
from kernelkiln.torch import apply_rotary_ref, rotary_embedding_ref

R = kernelkiln.transform.apply_rotary


def _q(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


def _cache(rows=64, d=64):
    ang = torch.rand(rows, d // 2) * 6.283
    return torch.cat((ang.cos(), ang.sin()), dim=1)


CUDA = "need a CUDA tensor"  # every other check passed


@pytest.mark.parametrize("call, exc, words", [
    (lambda: R(_q(8, 2, 64), _cache()), ValueError, CUDA),
    (lambda: R(_q(2, 8, 2, 64), _cache(), key=_q(2, 8, 4, 64), positions=torch.zeros(2, 8, dtype=torch.int64),
               interleaved=True, conjugate=True, seqlen_offset=5), ValueError, CUDA),
    (lambda: R(_q(8, 2, 64, dtype=torch.float16), _cache()), TypeError, "query has dtype"),
    (lambda: R(_q(8, 64), _cache()), ValueError, r"query must be \[T, heads, D\]"),
    (lambda: R(_q(8, 2, 64), _cache().double()), TypeError, "cos_sin_cache has dtype"),
    (lambda: R(_q(8, 2, 48), _cache(d=48)), ValueError, "rotary head dim"),
    (lambda: R(_q(8, 2, 96), _cache()), ValueError, r"query.shape\[-1\] must equal the cache's head dim 64"),
    (lambda: R(_q(8, 2, 128)[..., ::2], _cache()), ValueError, "inner stride 1"),
    (lambda: R(_q(8, 3, 66)[..., :64], _cache()), ValueError, "stride must be a multiple of 4"),
    (lambda: R(_q(8, 2, 64), _cache()[:, :64].t().contiguous().t()), ValueError, "cos_sin_cache must have inner"),
    (lambda: R(_q(8, 2, 64), _cache(), key=_q(8, 2, 64, dtype=torch.float32)), TypeError, "key has dtype"),
    (lambda: R(_q(8, 2, 64), _cache(), key=_q(9, 2, 64)), ValueError, "key must have query's rank"),
    (lambda: R(_q(8, 2, 64), _cache(), positions=torch.zeros(8)), TypeError, "positions has dtype"),
    (lambda: R(_q(8, 2, 64), _cache(), positions=torch.zeros(7, dtype=torch.int32)), ValueError,
     r"positions must have shape \(8,\)"),
    (lambda: R(_q(2, 8, 2, 64), _cache(), positions=torch.zeros(8, dtype=torch.int32)), ValueError,
     r"positions must have shape \(2, 8\)"),
    (lambda: R(_q(8, 2, 64), _cache(), interleaved=1), TypeError, "interleaved must be a bool"),
    (lambda: R(_q(8, 2, 64), _cache(), conjugate=None), TypeError, "conjugate must be a bool"),
    (lambda: R(_q(8, 2, 64), _cache(), seqlen_offset=1.0), TypeError, "seqlen_offset must be a Python int"),
    (lambda: R(_q(8, 2, 64), _cache(rows=6)), ValueError, "outside the cache's 6 rows"),
    (lambda: R(_q(8, 2, 64), _cache(), seqlen_offset=-1), ValueError, "outside the cache"),
    (lambda: R(_q(8, 2, 64), _cache(), positions=torch.zeros(8, dtype=torch.int32), seqlen_offset=2**31),
     ValueError, "fit in int32"),
    (lambda: R("q", _cache()), TypeError, "query must be a torch.Tensor"),
])
def test_bad_arguments_name_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_positions_make_the_range_check_the_callers():
    """Given positions are read on the device and not checked (as in the peer): only the device is wrong here."""
    with pytest.raises(ValueError, match=CUDA):
        R(_q(8, 2, 64), _cache(rows=4), positions=torch.full((8,), 100, dtype=torch.int32))


def test_fma_reference_is_within_one_rounding_of_the_unfused_one():
    torch.manual_seed(0)
    x, cache = _q(3, 50, 4, 64, dtype=torch.float32), _cache(100)
    pos = torch.randint(0, 90, (3, 50))
    for interleaved in (False, True):
        for conjugate in (False, True):
            got, _ = apply_rotary_ref(x, cache, positions=pos, interleaved=interleaved, conjugate=conjugate,
                                      seqlen_offset=7)
            want = rotary_embedding_ref(x, cache[:, :32], cache[:, 32:], positions=pos, seqlen_offsets=7,
                                        interleaved=interleaved, conjugate=conjugate)
            assert torch.allclose(got, want, rtol=0, atol=4e-7 * x.abs().max().item())


def test_fma_reference_matches_the_exact_rotation_to_one_ulp():
    """Against the rotation in float64: the fma form has two roundings (the product b*s or b*cos, and the fma), each
    at most half an ulp of |a*cos| + |b*sin| (resp. |a*sin| + |b*cos|)."""
    torch.manual_seed(1)
    x, cache = _q(200, 2, 128, dtype=torch.float32), _cache(256, 128)
    got, _ = apply_rotary_ref(x, cache)
    c, s = cache[:200, :64].double()[:, None], cache[:200, 64:].double()[:, None]
    a, b = x[..., :64].double(), x[..., 64:].double()
    exact = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    scale = torch.cat(((a * c).abs() + (b * s).abs(), (a * s).abs() + (b * c).abs()), dim=-1)
    assert ((got.double() - exact).abs() <= 1.01 * torch.finfo(torch.float32).eps * scale).all()


def test_conjugate_inverts_the_rotation():
    torch.manual_seed(2)
    x, cache = _q(64, 4, 64, dtype=torch.float32), _cache()
    fwd, _ = apply_rotary_ref(x, cache)
    back, _ = apply_rotary_ref(fwd, cache, conjugate=True)
    assert torch.allclose(back, x, atol=1e-5)


def test_unfused_reference_passes_wider_channels_through():
    x, cache = _q(16, 2, 96), _cache(32)
    out = rotary_embedding_ref(x, cache[:, :32], cache[:, 32:])
    assert torch.equal(out[..., 64:], x[..., 64:]) and not torch.equal(out[..., :64], x[..., :64])


def test_int64_positions_are_truncated_to_int32_before_the_offset():
    x, cache = _q(4, 1, 64, dtype=torch.float32), _cache(16)
    wide = torch.tensor([2**32 + 3, 5, 2**33, 1], dtype=torch.int64)
    got, _ = apply_rotary_ref(x, cache, positions=wide, seqlen_offset=2)
    want, _ = apply_rotary_ref(x, cache, positions=torch.tensor([3, 5, 0, 1]), seqlen_offset=2)
    assert torch.equal(got, want)


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 40), heads=st.integers(1, 6), d=st.sampled_from([32, 64, 128, 256]),
       interleaved=st.booleans(), conjugate=st.booleans(), offset=st.integers(0, 20),
       special=st.sampled_from([None, float("inf"), float("-inf"), float("nan"), 0.0, -0.0]))
def test_reference_elementwise_properties(t, heads, d, interleaved, conjugate, offset, special):
    """Each output pair depends only on its own pair and cache row; a special value spreads only within its pair,
    as in IEEE arithmetic; zeros stay zeros."""
    g = torch.Generator().manual_seed(t * 1000 + heads * 10 + d)
    x = torch.randn(t, heads, d, generator=g)
    if special is not None:
        x[t // 2, 0, 0] = special
    cache = _cache(t + offset + 1, d)
    got, _ = apply_rotary_ref(x, cache, interleaved=interleaved, conjugate=conjugate, seqlen_offset=offset)
    for i in range(t):
        one, _ = apply_rotary_ref(x[i:i + 1], cache[offset + i:offset + i + 1], interleaved=interleaved,
                                  conjugate=conjugate)
        assert torch.equal(got[i:i + 1].view(torch.int32), one.view(torch.int32))
    zero, _ = apply_rotary_ref(torch.zeros(t, heads, d), cache, interleaved=interleaved, seqlen_offset=offset)
    assert torch.equal(zero.abs(), torch.zeros_like(zero))
