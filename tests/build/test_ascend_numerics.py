"""The Ascend kernels' numerics, checked on the CPU bit for bit against the references (kernelkiln.torch).

kernels/common/ascend_numerics.py writes the formulas once over an abstract vector ``ops``; the kernel
(kernels/quant/per_token_cast_ascend.py) runs them with TileLang's SIMD instructions, these tests with numpy
(``NumpyOps``). So what is checked here is exactly the arithmetic the kernel emits, instruction for instruction, under
the assumption that the NPU's fp32 multiply/add round to nearest even and its ``vdiv(precision='exact')`` is
correctly rounded (docs/ASCEND.md says what only the NPU tests can verify). The topk selection rule is modelled the
same way (max over registers, then the smallest index among the equal lanes, the winner masked to -inf).
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.common import ascend_numerics as N  # noqa: E402
from kernelkiln.torch import quant as Q  # noqa: E402

OPS = N.NumpyOps()


def _bits(values):
    return np.asarray(values, dtype=np.uint32).view(np.float32)


def _special_fp32():
    s = [0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
         0xFFC00000, 0x7F800001]
    for v in (448.0, 464.0, 463.99997, 480.0, 2.0**-6, 2.0**-7, 2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 6.0, 5.0, 7.0,
              0.25, 0.75, 1.25, 1.75, 2.5, 3.5):
        b = np.float32(v).view(np.uint32)
        s += [int(b), int(b) + 1, int(b) - 1, int(b) | 0x80000000]
    return _bits(s)


def _inputs():
    all_bf16 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    rng = np.random.default_rng(0)
    random32 = rng.integers(0, 1 << 32, size=400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return [all_bf16, random32, _special_fp32()]


@pytest.mark.parametrize("which", ["all bf16 values", "random fp32", "boundaries"])
def test_e4m3_encoder_matches_the_reference(which):
    y = _inputs()[["all bf16 values", "random fp32", "boundaries"].index(which)]
    got = N.e4m3_codes(OPS, y).astype(np.uint8)
    want = Q._to_e4m3(torch.from_numpy(y.copy())).view(torch.uint8).numpy()
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(hex(int(y.view(np.uint32)[i])), int(got[i]), int(want[i])) for i in bad[:8]]


@pytest.mark.parametrize("which", ["all bf16 values", "random fp32", "boundaries"])
def test_e2m1_encoder_matches_the_reference(which):
    y = _inputs()[["all bf16 values", "random fp32", "boundaries"].index(which)]
    got = N.e2m1_nibbles(OPS, y)
    want = Q._e2m1_nibbles(torch.from_numpy(y.copy())).numpy()
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(hex(int(y.view(np.uint32)[i])), int(got[i]), int(want[i])) for i in bad[:8]]


def model_per_token_cast(x_bf16, fmt, g, sf_kind, round_sf, clamp_min):
    """The kernel's three phases on a [T, H] bf16 tensor with NumpyOps: block amax of |x| bits, the scales of each
    block, encode(x * sf_inv); returns (data bytes [T, H or H/2] uint8, scale words [T, ceil(K / per_word)])."""
    x = x_bf16.float().numpy()
    t, h = x.shape
    k = -(-h // g)
    a = N.abs_bits_nan_zero(OPS, OPS.bits(x))
    padded = np.zeros((t, k * g), dtype=np.int32)
    padded[:, :h] = a
    amax = padded.reshape(t, k, g).max(axis=2)
    clamp = OPS.bits(np.float32(clamp_min))
    fmt_max = {"e4m3": 448.0, "e2m1": 6.0}[fmt]
    kind = "ue8m0" if sf_kind == "ue8m0" else ("pow2" if round_sf else "div")
    stored, inv = N.scales(OPS, amax, clamp, fmt_max, kind)
    y = OPS.fmul(x, np.repeat(OPS.float(inv), g, axis=1)[:, :h])
    if fmt == "e4m3":
        data = N.e4m3_codes(OPS, y).astype(np.uint8)
    else:
        nib = N.e2m1_nibbles(OPS, y)
        data = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    if sf_kind == "ue8m0":
        words = np.zeros((t, -(-k // 4) * 4), dtype=np.uint8)
        words[:, :k] = stored.astype(np.uint8)
        sf = words.view(np.int32)
    else:
        sf = OPS.float(stored)
    return data, sf


def _test_matrix(t, h, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g) * torch.exp2(torch.randint(-20, 20, (t, 1), generator=g).float())
    x[0, :7] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 3e38, -1e-40, 1e-38])
    x[1] = 0.0  # an all-zero row: amax is the floor
    x[2, 64:] = -0.0
    x[3] = torch.randn(h, generator=g) * 1e-38  # subnormal bf16 under the e2m1 floor
    return x.to(torch.bfloat16)


@pytest.mark.parametrize("fmt,g,sf_kind,round_sf", [
    ("e4m3", 128, "fp32", False), ("e4m3", 128, "fp32", True), ("e4m3", 128, "ue8m0", True),
    ("e2m1", 32, "fp32", False), ("e2m1", 32, "fp32", True), ("e2m1", 32, "ue8m0", True),
    ("e4m3", 32, "fp32", False), ("e2m1", 128, "ue8m0", True)])
def test_per_token_cast_model_matches_the_reference(fmt, g, sf_kind, round_sf):
    x = _test_matrix(37, 64 * 9, seed=g + len(fmt) + round_sf)  # H % 128 == 64: a half block ends every row
    clamp = Q.default_clamp_min(fmt)
    data, sf = model_per_token_cast(x, fmt, g, sf_kind, round_sf, clamp)
    q, sf_ref = Q.per_token_cast_ref(x, fmt, g, round_sf=round_sf, use_packed_ue8m0=sf_kind == "ue8m0")
    assert np.array_equal(data, q.view(torch.uint8).numpy())
    if sf_kind == "ue8m0":
        assert np.array_equal(sf, sf_ref.numpy())
    else:
        assert np.array_equal(sf.view(np.int32), sf_ref.view(torch.int32).numpy())


def model_topk(scores, k):
    """The Ascend topk_gate's selection on one row, as the kernel does it over 64-lane registers."""
    e = scores.shape[0]
    nv = -(-e // 64)
    lanes = np.arange(nv * 64)
    vals = np.full(nv * 64, -np.inf, dtype=np.float32)
    vals[:e] = scores
    if not np.isfinite(scores).all():
        return [-1] * k
    out = []
    for _ in range(k):
        top = vals.max()
        winner = int(np.where(vals == top, lanes, 2**31 - 1).min())
        out.append(winner)
        vals = np.where(lanes == winner, np.float32(-np.inf), vals)
    return out


@pytest.mark.parametrize("e,k", [(8, 2), (64, 8), (65, 8), (256, 8), (384, 32), (512, 1)])
def test_topk_selection_model_matches_the_reference(e, k):
    from kernelkiln.torch.moe import topk_gate_ref
    g = torch.Generator().manual_seed(e * 100 + k)
    scores = torch.randn(16, e, generator=g)
    scores[1] = 0.5  # all tied: the k smallest indices
    scores[2, ::2] = -0.0  # -0.0 ties +0.0
    scores[2, 1::2] = 0.0
    scores[3] = torch.round(scores[3] * 2) / 2  # many ties
    want = topk_gate_ref(scores, k)
    for row in range(16):
        assert model_topk(scores[row].numpy(), k) == want[row].tolist(), row
