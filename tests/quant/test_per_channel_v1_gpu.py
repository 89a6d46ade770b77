"""v1 per_channel_cast_and_transpose / swiglu_forward_and_per_channel_cast_and_transpose on the GPU.

Bit-exact against kernelkiln.torch.quant_v1 (cast(y, 'e4m3', (gm, 1)) of x or of the fp32 SwiGLU,
computed on the same GPU so that torch's expf matches the kernel's).
"""
import pytest
import torch

import kernelkiln
from kernelkiln.torch.quant_v1 import (
    per_channel_cast_and_transpose_ref,
    swiglu_forward_and_per_channel_cast_and_transpose_ref,
)
from bitwise import assert_bitwise  # noqa: E402


def _assert_bitwise(actual, expected, what):
    assert_bitwise(actual, expected, what)
    assert actual.is_contiguous(), f"{what}: not contiguous, strides {actual.stride()}"


pytestmark = pytest.mark.gpu

TOKENS = [128, 4096, 8064]
HIDDEN = [64, 576, 2048, 7168]  # 64 / 576: a partial 256-column CTA tile
INTER = [64, 192, 1024, 2048]  # I; x is [T, 2I], 2I % 128 == 0


def _input(t, h):
    # Each column gets its own magnitude (binades -20..+12), so per-column scales differ widely; no zeros.
    col_scale = torch.exp2(torch.randint(-20, 12, (1, h), device="cuda").float())
    x = torch.randn(t, h, device="cuda")
    x = torch.where(x == 0, torch.full_like(x, 0.5), x)
    return (x * col_scale).bfloat16()


def _swiglu_input(t, i):
    # gate/up in a few binades around 1 (the clamp values 0.5 / 10 bite), per-column spread.
    col_scale = torch.exp2(torch.randint(-6, 5, (1, 2 * i), device="cuda").float())
    x = torch.randn(t, 2 * i, device="cuda")
    x = torch.where(x == 0, torch.full_like(x, 0.5), x)
    return (x * col_scale).bfloat16()


@pytest.fixture(autouse=True)
def _poison():
    # Fill the caching allocator's free blocks with 0xFF first, so an unwritten output byte shows.
    junk = torch.full((1 << 26,), 0xFF, dtype=torch.uint8, device="cuda")
    del junk


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("gm", [32, 128])
@pytest.mark.parametrize("round_sf", [False, True])
def test_per_channel_cast_and_transpose(seed, t, h, gm, round_sf):
    x = _input(t, h)
    q, sf = kernelkiln.quant.per_channel_cast_and_transpose(x, "e4m3", gm, round_sf=round_sf)
    rq, rsf = per_channel_cast_and_transpose_ref(x, "e4m3", gm, round_sf)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("i", INTER)
@pytest.mark.parametrize("gm", [32, 128])
@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("without_transpose", [False, True])
@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
def test_swiglu_forward_and_per_channel_cast_and_transpose(seed, t, i, gm, round_sf, without_transpose, clamp):
    if t == 8064 and i not in (192, 2048):
        pytest.skip("8064 tokens: two I values are enough")
    x = _swiglu_input(t, i)
    q, sf = kernelkiln.quant.swiglu_forward_and_per_channel_cast_and_transpose(
        x, "e4m3", gm, round_sf=round_sf, without_transpose=without_transpose, swiglu_clamp_value=clamp)
    rq, rsf = swiglu_forward_and_per_channel_cast_and_transpose_ref(x, "e4m3", gm, round_sf, without_transpose, clamp)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("gm", [32, 128])
def test_special_values(seed, gm):
    x = _input(256, 384)  # swiglu: I = 192
    x[:, 0] = 0.0  # all-zero column: amax floor 1e-4
    x[5, 2] = 448.0 * 2**100  # one huge value dominates its column block
    x[:, 3] = 2.0**-120  # tiny column
    x[7, 4] = float("nan")  # NaN: not counted in the amax
    for fn, ref in ((lambda v: kernelkiln.quant.per_channel_cast_and_transpose(v, "e4m3", gm),
                     lambda v: per_channel_cast_and_transpose_ref(v, "e4m3", gm)),
                    (lambda v: kernelkiln.quant.swiglu_forward_and_per_channel_cast_and_transpose(
                        v, "e4m3", gm, without_transpose=True, swiglu_clamp_value=10.0),
                     lambda v: swiglu_forward_and_per_channel_cast_and_transpose_ref(v, "e4m3", gm, False, True, 10.0))):
        q, sf = fn(x)
        rq, rsf = ref(x)
        _assert_bitwise(sf, rsf, "special scales")
        _assert_bitwise(q, rq, "special data")


def test_empty_tokens():
    x = torch.empty((0, 128), dtype=torch.bfloat16, device="cuda")
    q, sf = kernelkiln.quant.per_channel_cast_and_transpose(x, "e4m3", 128)
    assert q.shape == (128, 0) and sf.shape == (0, 128)
    q, sf = kernelkiln.quant.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", 32)
    assert q.shape == (64, 0) and sf.shape == (0, 64)


def test_torch_compile_matches_eager(seed):
    x = _swiglu_input(256, 192)

    @torch.compile(fullgraph=True)
    def f(v):
        a = kernelkiln.quant.per_channel_cast_and_transpose(v, "e4m3", 128, round_sf=True)
        b = kernelkiln.quant.swiglu_forward_and_per_channel_cast_and_transpose(v, "e4m3", 32, swiglu_clamp_value=0.5)
        return a + b

    got = f(x)
    want = (*kernelkiln.quant.per_channel_cast_and_transpose(x, "e4m3", 128, round_sf=True),
            *kernelkiln.quant.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", 32, swiglu_clamp_value=0.5))
    for g, w in zip(got, want):
        _assert_bitwise(g, w, "compiled")
