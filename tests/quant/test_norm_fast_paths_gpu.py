"""norm_forward fast paths on the GPU, bit for bit against kernelkiln.torch.norm.

The kernel picks one of three chunk loops per launch: weight with out_scale == 1 (the
w * 1.0 multiply is skipped, exact), weight with another out_scale, and no weight. The
main GPU tests use out_scale != 1; these cover out_scale == 1 (the default, and the
benchmarked case), special weight values (+-0, subnormals) and whole chunks past the row.
"""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from kernelkiln.torch import norm_forward_ref

pytestmark = pytest.mark.gpu

SF_OPTIONS = {"fp32": (False, False), "fp32-round": (True, False), "ue8m0": (True, True)}


def _bits(t):
    t = t.detach().contiguous().cpu()
    return t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _same(actual, expected, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    a, e = _bits(actual), _bits(expected)
    bad = (a != e).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} of {a.numel()} differ, first at {bad[0].tolist()}"


def _rand(shape, dtype):
    x = torch.randn(shape, device="cuda") * torch.exp2(torch.randint(-6, 6, list(shape[:-1]) + [1], device="cuda").float())
    return x.to(dtype)


def _weight(h, dtype, special):
    w = (1 + 0.2 * torch.randn(h, device="cuda")).to(dtype)
    if special:  # +-0 and subnormal weights (exact through the skipped * 1.0)
        tiny = torch.finfo(dtype).tiny
        w[0::7] = 0.0
        w[1::7] = -0.0
        w[2::7] = tiny / 4
        w[3::7] = -tiny / 8
    return w


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("h", [128, 528, 1536, 7168, 8192])
@pytest.mark.parametrize("opt", list(SF_OPTIONS))
@pytest.mark.parametrize("weight_kind", ["plain", "special", "none"])
@pytest.mark.parametrize("out_scale", [1.0, 0.75])
def test_cast_weight_modes_bitwise(seed, dtype, h, opt, weight_kind, out_scale):
    round_sf, packed = SF_OPTIONS[opt]
    x = _rand((37, h), dtype)
    w = None if weight_kind == "none" else _weight(h, dtype, weight_kind == "special")
    (q, sf), ob, rstd, _ = kernelkiln.quant.norm_forward_and_per_token_cast(
        x, w, 1e-6, "e4m3", 32, out_scale=out_scale, round_sf=round_sf, use_packed_ue8m0=packed,
        with_out_bf16=True, with_rstd=True)
    eo, er, _ = norm_forward_ref(x.cpu(), None if w is None else w.cpu(), 1e-6, out_scale=out_scale)
    eq, esf = ref_cast(eo, "e4m3", (1, 32), round_sf=round_sf, use_packed_ue8m0=packed)
    _same(q, eq, "data")
    _same(sf, esf, "scales")
    _same(ob, eo.to(torch.bfloat16), "out_bf16")
    _same(rstd, er, "rstd")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("h", [16, 528, 7168, 8192])
@pytest.mark.parametrize("weight_kind", ["plain", "special", "none"])
def test_plain_out_scale_one_bitwise(seed, dtype, h, weight_kind):
    x = _rand((41, h), dtype)
    w = None if weight_kind == "none" else _weight(h, dtype, weight_kind == "special")
    out, rstd, _ = kernelkiln.quant.norm_forward(x, w, 1e-6, with_rstd=True)
    eo, er, _ = norm_forward_ref(x.cpu(), None if w is None else w.cpu(), 1e-6)
    _same(out, eo, "out")
    _same(rstd, er, "rstd")
