"""CPU checks of the v1 per-channel transpose ops: error paths (before any device work), fakes, references."""
import pytest
import torch

from kernelkiln.quant import per_channel_cast_and_transpose, swiglu_forward_and_per_channel_cast_and_transpose
from kernelkiln.torch import cast, swiglu_forward
from kernelkiln.torch.quant_v1 import (
    per_channel_cast_and_transpose_ref,
    swiglu_forward_and_per_channel_cast_and_transpose_ref,
)

X = torch.zeros(128, 64, dtype=torch.bfloat16)
X2 = torch.zeros(128, 256, dtype=torch.bfloat16)


def _p(**kw):
    args = dict(x=X, fmt="e4m3", num_per_tokens=128)
    args.update(kw)
    return per_channel_cast_and_transpose(**args)


def _s(**kw):
    args = dict(x=X2, fmt="e4m3", num_per_tokens=128)
    args.update(kw)
    return swiglu_forward_and_per_channel_cast_and_transpose(**args)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: _p(x=X.float()), TypeError, "x has dtype"),
    (lambda: _p(x=X.tolist()), TypeError, "x must be a torch.Tensor"),
    (lambda: _p(x=torch.zeros(2, 128, 64, dtype=torch.bfloat16)), ValueError, "2-D"),
    (lambda: _p(x=torch.zeros(96, 64, dtype=torch.bfloat16)), ValueError, r"T % 128 == 0 and H % 64 == 0"),
    (lambda: _p(x=torch.zeros(128, 96, dtype=torch.bfloat16)), ValueError, r"H % 64 == 0"),
    (lambda: _p(x=torch.zeros(128, 128, dtype=torch.bfloat16)[:, :64]), ValueError, "contiguous"),
    (lambda: _p(fmt="e2m1"), ValueError, "fmt must be one of"),
    (lambda: _p(num_per_tokens=64), ValueError, r"num_per_tokens must be one of \[32, 128\]"),
    (lambda: _p(num_per_tokens=128.0), TypeError, "num_per_tokens must be an int"),
    (lambda: _p(num_per_tokens=True), TypeError, "num_per_tokens must be an int"),
    (lambda: _p(round_sf=1), TypeError, "round_sf must be a bool"),
    (lambda: _p(), ValueError, "CUDA tensor"),
    (lambda: _s(x=X2.float()), TypeError, "x has dtype"),
    (lambda: _s(x=torch.zeros(128, 192, dtype=torch.bfloat16)), ValueError, r"2I % 128 == 0"),
    (lambda: _s(x=torch.zeros(64, 256, dtype=torch.bfloat16)), ValueError, r"T % 128 == 0"),
    (lambda: _s(fmt="e5m6"), ValueError, "fmt must be one of"),
    (lambda: _s(num_per_tokens=16), ValueError, "num_per_tokens must be one of"),
    (lambda: _s(round_sf="yes"), TypeError, "round_sf must be a bool"),
    (lambda: _s(without_transpose=None), TypeError, "without_transpose must be a bool"),
    (lambda: _s(swiglu_clamp_value="10"), TypeError, "swiglu_clamp_value must be None or a float"),
    (lambda: _s(swiglu_clamp_value=True), TypeError, "swiglu_clamp_value must be None or a float"),
    (lambda: _s(swiglu_clamp_value=-1.0), ValueError, "swiglu_clamp_value must be a finite float >= 0"),
    (lambda: _s(swiglu_clamp_value=float("nan")), ValueError, "swiglu_clamp_value"),
    (lambda: _s(swiglu_clamp_value=10.0), ValueError, "CUDA tensor"),
])
def test_bad_arguments_are_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("gm", [32, 128])
def test_fake_shapes(gm):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(256, 192, dtype=torch.bfloat16, device="cuda")
        q, sf = torch.ops.kernelkiln.per_channel_cast_and_transpose(x, "e4m3", gm, False)
        assert q.shape == (192, 256) and q.dtype == torch.float8_e4m3fn
        assert sf.shape == (256 // gm, 192) and sf.dtype == torch.float32
        x2 = torch.empty(256, 384, dtype=torch.bfloat16, device="cuda")
        q, sf = torch.ops.kernelkiln.swiglu_forward_and_per_channel_cast_and_transpose(x2, "e4m3", gm, True, False, 10.0)
        assert q.shape == (192, 256) and sf.shape == (256 // gm, 192)
        q, sf = torch.ops.kernelkiln.swiglu_forward_and_per_channel_cast_and_transpose(x2, "e4m3", gm, False, True, None)
        assert q.shape == (256, 192) and sf.shape == (256 // gm, 192)


@pytest.mark.parametrize("gm", [32, 128])
@pytest.mark.parametrize("round_sf", [False, True])
def test_reference_is_transposed_per_channel_cast(seed, gm, round_sf):
    x = (torch.randn(256, 192) * torch.exp2(torch.randint(-10, 10, (1, 192)).float())).bfloat16()
    q, sf = per_channel_cast_and_transpose_ref(x, "e4m3", gm, round_sf)
    rq, rsf = cast(x, "e4m3", (gm, 1), round_sf=round_sf)
    assert q.shape == (192, 256) and q.is_contiguous()
    assert torch.equal(q.view(torch.uint8), rq.t().view(torch.uint8)) and torch.equal(sf, rsf)
    # Dequantized values are within half an e4m3 step of the input (normal: 2^-4 relative; subnormal: 2^-10 sf).
    scale = sf.repeat_interleave(gm, 0)
    deq = q.float().t() * scale
    assert ((deq - x.float()).abs() <= x.float().abs() * 2**-4 + scale * 2**-10).all()


@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
@pytest.mark.parametrize("without_transpose", [False, True])
def test_swiglu_reference(seed, clamp, without_transpose):
    x = (torch.randn(128, 256) * 4).bfloat16()
    q, sf = swiglu_forward_and_per_channel_cast_and_transpose_ref(x, "e4m3", 32, True, without_transpose, clamp)
    y = swiglu_forward(x, clamp_value=clamp)
    rq, rsf = cast(y, "e4m3", (32, 1), round_sf=True)
    assert torch.equal(sf, rsf) and sf.shape == (4, 128)
    expected = rq if without_transpose else rq.t()
    assert q.shape == expected.shape and torch.equal(q.view(torch.uint8), expected.contiguous().view(torch.uint8))
    if clamp is not None:  # |silu(min(g, c))| * |clamp(u)| bounds the output
        assert y.abs().max() <= max(clamp, 0.2785) * clamp * 1.0001
