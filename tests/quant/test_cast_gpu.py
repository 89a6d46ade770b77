"""quant.cast on the GPU against the bit-exact reference (kernelkiln.torch.stochastic.cast_dtype).

The stochastic rounding is a software emulation on every architecture, so these
comparisons are bit-exact on sm_90a and sm_100a alike.
"""
import math

import pytest
import torch

import kernelkiln
from kernelkiln.quant import _cast
from kernelkiln.torch.stochastic import cast_dtype, stochastic_round
from bitwise import assert_bitwise as _assert_bitwise  # noqa: E402

pytestmark = pytest.mark.gpu

F32, BF16, E4M3 = torch.float32, torch.bfloat16, torch.float8_e4m3fn
RNE_PAIRS = [(F32, BF16), (F32, E4M3), (BF16, E4M3), (BF16, F32), (E4M3, BF16), (E4M3, F32)]
SR_PAIRS = [(F32, BF16), (F32, E4M3), (BF16, E4M3)]


def _input(shape, dtype):
    """Random values over many binades (fp32 and e4m3 subnormals included), never all zeros."""
    n = math.prod(shape)
    x = torch.randn(n, device="cuda") * torch.exp2(torch.randint(-24, 10, (n,), device="cuda").float())
    if dtype == E4M3:
        x = x.clamp(-448, 448)
    return x.to(dtype).reshape(shape)


def _specials(dtype):
    v = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, -448.0, 464.0, 1e6, 2.0**-6, 2.0**-9,
         -2.0**-10, 3e-39, -1e-45, 3.3e38, -3.39e38, 1.0, -1.5]
    if dtype == E4M3:
        return torch.arange(256, dtype=torch.uint8).view(E4M3)  # every code, both NaNs included
    return torch.tensor(v * 2, dtype=torch.float32)[:36].to(dtype)  # 36 elements: a multiple of 4


@pytest.mark.parametrize("pair", RNE_PAIRS, ids=lambda p: f"{p}")
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (1031,), (4099, 129), (128, 7168)])
def test_rne_matches_reference(seed, pair, shape):
    src, dst = pair
    x = _input(shape, src)
    y = kernelkiln.quant.cast(x, dst)
    _assert_bitwise(y, cast_dtype(x.cpu(), dst), f"{src}->{dst} {shape}")


@pytest.mark.parametrize("pair", SR_PAIRS, ids=lambda p: f"{p}")
@pytest.mark.parametrize("shape", [(0,), (4,), (3, 4), (1028,), (4099, 132), (16, 8, 7168), (8192 * 4 + 12,)])
def test_stochastic_matches_reference(seed, pair, shape):
    src, dst = pair
    x = _input(shape, src)
    y = kernelkiln.quant.cast(x, dst, stochastic_rounding=True)
    _assert_bitwise(y, cast_dtype(x.cpu(), dst, stochastic_rounding=True), f"SR {src}->{dst} {shape}")
    # deterministic: same input, same bits
    _assert_bitwise(kernelkiln.quant.cast(x, dst, stochastic_rounding=True), y, "rerun")


@pytest.mark.parametrize("pair", RNE_PAIRS, ids=lambda p: f"{p}")
@pytest.mark.parametrize("stochastic", [False, True])
def test_special_values(pair, stochastic):
    src, dst = pair
    if stochastic and pair not in SR_PAIRS:
        pytest.skip("no stochastic rounding for this pair")
    x = _specials(src).cuda()
    y = kernelkiln.quant.cast(x, dst, stochastic_rounding=stochastic)
    _assert_bitwise(y, cast_dtype(x.cpu(), dst, stochastic_rounding=stochastic), f"specials {src}->{dst}")


@pytest.mark.parametrize("dst", [BF16, E4M3])
def test_stochastic_is_unbiased(seed, dst):
    n = 1 << 20
    # Uniform in [1, 2): on each output grid the position between neighbours is uniform, so
    # a fair rounding puts half the non-exact results below x.
    x = torch.rand(n, device="cuda") + 1.0
    y = kernelkiln.quant.cast(x, dst, stochastic_rounding=True).float()
    inexact = y != x
    p_below = ((y < x) & inexact).sum().item() / inexact.sum().item()
    assert abs(p_below - 0.5) < 10 / math.sqrt(inexact.sum().item()), p_below
    ulp = 2.0**-7 if dst == BF16 else 2.0**-3
    assert abs((y.double() - x.double()).mean().item()) < 0.01 * ulp


def test_misaligned_view_and_noncontiguous_input(seed):
    base = _input((4 * 1000 + 4,), F32)
    view = base[4:]  # 16-byte aligned
    odd = base[1:4001]  # 4-byte offset: copied to an aligned buffer first
    for x in (view, odd):
        _assert_bitwise(kernelkiln.quant.cast(x, E4M3, True), cast_dtype(x.cpu(), E4M3, True), "view")
    with pytest.raises(ValueError, match="contiguous"):
        kernelkiln.quant.cast(_input((64, 32), F32).t(), BF16)


def test_quad_index_continues_across_launches(monkeypatch, seed):
    # A small launch size exercises the > 2**30-element path: q must continue across launches.
    monkeypatch.setattr(_cast, "CHUNK", 8192 * 4)
    x = _input((8192 * 4 * 3 + 40,), F32)
    y = kernelkiln.quant.cast(x, BF16, True)
    _assert_bitwise(y, cast_dtype(x.cpu(), BF16, True), "chunked")


def test_large_tensor_chunk_boundary():
    n = (1 << 30) + 4096
    x = torch.randn(n, device="cuda")
    y = kernelkiln.quant.cast(x, E4M3, True)
    lo = (1 << 30) - 4096
    ref = stochastic_round(x[lo:].cpu(), E4M3, quad_offset=lo // 4)
    _assert_bitwise(y[lo:], ref, "chunk boundary")
    del x, y
    torch.cuda.empty_cache()
