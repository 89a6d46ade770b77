"""The v1 pre-norm projection ops on the CPU: ``round_to_tf32`` against the peer's (tile_kernels 1.0's
mhc/norm_fn_kernel.py, loaded by path) and against an independent rounding in float64, ``tf32_operand`` and the
ordered sum of squares against scalar emulations, the references composed with the RMS step against the peer's
v1 torch form, and every argument error of the two public functions (raised before the CUDA check)."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkiln._formats import round_to_tf32
from kernelkiln.mhc import mhc_pre_norm_fn_bwd_mul, mhc_pre_norm_fn_fwd_mul
from kernelkiln.torch.mhc_norm_fn import (mhc_pre_norm_fn_bwd_mul_ref, mhc_pre_norm_fn_fwd_mul_ref,
                                          sqrsum_ordered_ref, tf32_operand)

finite_f32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@pytest.fixture(scope="module")
def peer_norm_fn(peer_reference):
    """The peer's v1 norm_fn_kernel.py (it needs tilelang to import; its factories are never called here)."""
    pytest.importorskip("tilelang")
    return peer_reference("mhc/norm_fn_kernel.py", "1.0.0")


@pytest.fixture(scope="module")
def peer_v1_mhc(peer_reference):
    return peer_reference("torch/mhc.py", "1.0.0")


def _bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


# ------------------------------------------------------------------------------------------------ TF32 rounding
def test_round_to_tf32_matches_peer(peer_norm_fn, seed):
    x = torch.cat([torch.randn(4096) * 10.0 ** torch.randint(-30, 30, (4096,)).float(),
                   torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), 1e-40, -1e-40, 3.4e38])])
    _bits(round_to_tf32(x), peer_norm_fn.round_to_tf32(x))


def _tf32_half_away(v):
    """v rounded to 11 significant bits, ties away from zero, in float64 (normal fp32 range)."""
    if v == 0.0:
        return v
    e = math.frexp(abs(v))[1]  # |v| = f·2^e, 0.5 <= f < 1
    ulp = 2.0 ** (e - 11)
    return math.copysign(math.floor(abs(v) / ulp + 0.5) * ulp, v)


@settings(max_examples=400, deadline=None)
@given(finite_f32.filter(lambda v: v == 0.0 or 1.2e-38 < abs(v) < 3.3e38))
def test_rounded_operand_is_half_away_rounding(v):
    # the value the tensor core reads after the caller's rounding: TF32 rounded half away from zero
    got = tf32_operand(round_to_tf32(torch.tensor([v], dtype=torch.float32))).item()
    assert got == _tf32_half_away(float(np.float32(v)))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_tf32_operand_clears_low_bits(bits):
    x = torch.tensor([bits - 2**32 if bits >= 2**31 else bits], dtype=torch.int32).view(torch.float32)
    got = tf32_operand(x).view(torch.int32).item() & 0xFFFFFFFF
    assert got == bits & ~0x1FFF & 0xFFFFFFFF


# ------------------------------------------------------------------------------------------------ sum of squares
def _sqrsum_scalar(row):
    """The forward kernel's order written as a scalar loop in numpy fp32 (an independent emulation)."""
    s = [np.float32(0)] * 4
    for c, v in enumerate(row):
        v = np.float32(v)
        s[c % 4] = np.float32(s[c % 4] + np.float32(v * v))
    return np.float32(np.float32(s[0] + s[2]) + np.float32(s[1] + s[3]))


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=5), st.integers(min_value=1, max_value=24), st.integers(0, 2**31 - 1))
def test_sqrsum_order_matches_scalar_emulation(n, k4, s):
    g = torch.Generator().manual_seed(s)
    # a wide exponent range so that the summation order shows in the bits
    x = (torch.randn(n, 4 * k4, generator=g) * 2.0 ** torch.randint(-20, 20, (n, 4 * k4), generator=g)).bfloat16()
    got = sqrsum_ordered_ref(x)
    want = torch.tensor([_sqrsum_scalar(r) for r in x.float().numpy()], dtype=torch.float32)
    _bits(got, want)


def test_sqrsum_special_values():
    x = torch.ones(3, 8, dtype=torch.bfloat16)
    x[0, 3], x[1, 5] = float("inf"), float("nan")
    s = sqrsum_ordered_ref(x)
    assert s[0] == float("inf") and s[1].isnan() and s[2] == 8.0


# ------------------------------------------------------------------------------------------------ references
def test_fwd_ref_with_rms_matches_peer_v1(peer_v1_mhc, seed):
    # out_mul · rsqrt(sqrsum / K + eps) is the peer's mhc_pre_norm_fn_ref; ours multiplies the TF32-rounded fn, so
    # the two agree to the rounding of fn (2^-11 relative per product, bounded by the magnitudes)
    n, m, h, eps = 64, 4, 256, 1e-6
    residual = torch.randn(n, 1, m, h).bfloat16()
    fn = torch.randn(m * (m + 2), m * h) * 1e-2
    out_mul, sqrsum = mhc_pre_norm_fn_fwd_mul_ref(residual.view(n, m * h), round_to_tf32(fn))
    mag, _ = mhc_pre_norm_fn_fwd_mul_ref(residual.view(n, m * h), fn, magnitudes=True)
    r = (sqrsum.double() / (m * h) + eps).rsqrt()
    ours = out_mul[:, 0] * r
    peer = peer_v1_mhc.mhc_pre_norm_fn_ref(residual, fn, None, eps).view(n, -1).double()
    assert (ours - peer).abs().le(2.0**-10 * mag[:, 0] * r + 1e-5 * peer.abs()).all()


def test_bwd_ref_matches_autograd(seed):
    n, k, m3 = 40, 256, 24
    x = torch.randn(n, k).bfloat16()
    fn = round_to_tf32(torch.randn(m3, k))
    g = round_to_tf32(torch.randn(n, 1, m3))
    sg = torch.randn(n, 1)
    xg0 = torch.randn(n, k).bfloat16()
    xa = x.double().requires_grad_()
    fa = tf32_operand(fn).double().requires_grad_()
    loss = (xa @ fa.t() * tf32_operand(g).double()[:, 0]).sum() + ((xa * xa).sum(1) * sg.double()[:, 0]).sum()
    loss.backward()
    x_new, fn_grad = mhc_pre_norm_fn_bwd_mul_ref(g, sg, x, fn, xg0)
    torch.testing.assert_close(x_new, xg0.double() + xa.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fn_grad, fa.grad, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------ argument errors
def _fwd_args(n=8, k=256, m3=24):
    return dict(x=torch.zeros(n, k, dtype=torch.bfloat16), fn=torch.zeros(m3, k),
                out_mul=torch.zeros(n, 1, m3), sqrsum=torch.zeros(n, 1))


def _bwd_args(n=8, k=256, m3=24):
    return dict(out_mul_grad=torch.zeros(n, 1, m3), sqrsum_grad=torch.zeros(n, 1),
                x=torch.zeros(n, k, dtype=torch.bfloat16), fn=torch.zeros(m3, k),
                x_grad=torch.zeros(n, k, dtype=torch.bfloat16), fn_grad=torch.zeros(m3, k))


FWD_BAD = [
    ({"x": torch.zeros(8, 256)}, TypeError, "x has dtype"),
    ({"x": [0.0]}, TypeError, "x must be a torch.Tensor"),
    ({"x": torch.zeros(8, 1, 256, dtype=torch.bfloat16)}, ValueError, "x must be 2-D"),
    ({"x": torch.zeros(256, 8, dtype=torch.bfloat16).t()}, ValueError, "x must be contiguous"),
    ({"fn": torch.zeros(24, 256, dtype=torch.bfloat16)}, TypeError, "fn has dtype"),
    ({"fn": torch.zeros(24, 512)}, ValueError, "fn must have shape"),
    ({"fn": torch.zeros(33, 256), "out_mul": torch.zeros(8, 1, 33)}, ValueError, r"mhc_mult3\) must be in 1\.\.32"),
    ({"fn": torch.zeros(0, 256), "out_mul": torch.zeros(8, 1, 0)}, ValueError, r"mhc_mult3\) must be in 1\.\.32"),
    ({"x": torch.zeros(8, 128, dtype=torch.bfloat16), "fn": torch.zeros(24, 128)}, ValueError, "multiple of 256"),
    ({"out_mul": torch.zeros(8, 24)}, ValueError, "out_mul must be 3-D"),
    ({"out_mul": torch.zeros(8, 1, 23)}, ValueError, "out_mul must have shape"),
    ({"out_mul": torch.zeros(8, 1, 24, dtype=torch.float64)}, TypeError, "out_mul has dtype"),
    ({"sqrsum": torch.zeros(8)}, ValueError, "sqrsum must be 2-D"),
    ({"sqrsum": torch.zeros(7, 1)}, ValueError, "sqrsum must have shape"),
    ({}, ValueError, "CUDA tensor"),
]


@pytest.mark.parametrize("bad, exc, match", FWD_BAD)
def test_fwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        mhc_pre_norm_fn_fwd_mul(**{**_fwd_args(), **bad})


BWD_BAD = [
    ({"out_mul_grad": torch.zeros(8, 24)}, ValueError, "out_mul_grad must be 3-D"),
    ({"out_mul_grad": torch.zeros(8, 1, 24, dtype=torch.bfloat16)}, TypeError, "out_mul_grad has dtype"),
    ({"sqrsum_grad": torch.zeros(8, 2)}, ValueError, "sqrsum_grad must have shape"),
    ({"x": torch.zeros(8, 256, dtype=torch.float16)}, TypeError, "x has dtype"),
    ({"x": torch.zeros(8, 64, dtype=torch.bfloat16), "fn": torch.zeros(24, 64), "x_grad":
      torch.zeros(8, 64, dtype=torch.bfloat16), "fn_grad": torch.zeros(24, 64)}, ValueError, "multiple of 128"),
    ({"fn": torch.zeros(40, 256)}, ValueError, r"mhc_mult3\) must be in 1\.\.32"),
    ({"x_grad": torch.zeros(8, 256)}, TypeError, "x_grad has dtype"),
    ({"x_grad": torch.zeros(8, 512, dtype=torch.bfloat16)}, ValueError, "x_grad must have x's shape"),
    ({"x_grad": torch.zeros(256, 8, dtype=torch.bfloat16).t()}, ValueError, "x_grad must be contiguous"),
    ({"fn_grad": torch.zeros(24, 128)}, ValueError, "fn_grad must have shape"),
    ({"fn_grad": torch.zeros(256, 24).t()}, ValueError, "fn_grad must be contiguous"),
    ({}, ValueError, "CUDA tensor"),
]


@pytest.mark.parametrize("bad, exc, match", BWD_BAD)
def test_bwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        mhc_pre_norm_fn_bwd_mul(**{**_bwd_args(), **bad})


def test_bwd_takes_k_multiple_of_128_only_fwd_needs_256():
    # K = 384 passes the backward's shape checks (and reaches the CUDA check), not the forward's
    with pytest.raises(ValueError, match="CUDA tensor"):
        mhc_pre_norm_fn_bwd_mul(**_bwd_args(k=384))
    with pytest.raises(ValueError, match="multiple of 256"):
        mhc_pre_norm_fn_fwd_mul(**_fwd_args(k=384))

