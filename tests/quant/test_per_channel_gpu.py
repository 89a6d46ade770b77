"""per_channel_cast on the GPU against the bit-exact reference kernelkiln.torch.cast(x, 'e4m3', (gm, 1))."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from bitwise import assert_bitwise  # noqa: E402


def _assert_bitwise(actual, expected, what):
    assert_bitwise(actual, expected, what)
    # row-major both (a size-1 dim may carry any stride)
    assert all(a == e for a, e, n in zip(actual.stride(), expected.stride(), actual.shape) if n > 1), \
        f"{what}: strides {actual.stride()} != {expected.stride()}"


pytestmark = pytest.mark.gpu

OPTIONS = {"fp32": (False, False), "fp32-round": (True, False), "ue8m0": (True, True)}  # (round_sf, packed)


def _input(t, h, dtype):
    # Each column gets its own magnitude (binades -20..+12) so per-column scales differ widely.
    col_scale = torch.exp2(torch.randint(-20, 12, (1, h), device="cuda").float())
    return (torch.randn(t, h, device="cuda") * col_scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("gm", [32, 128])
@pytest.mark.parametrize("opt", list(OPTIONS))
@pytest.mark.parametrize("shape", [(128, 128), (384, 384), (640, 2048), (4096, 7168)])
def test_per_channel_cast_matches_reference(seed, dtype, gm, opt, shape):
    round_sf, packed = OPTIONS[opt]
    x = _input(*shape, dtype)
    q, sf = kernelkiln.quant.per_channel_cast(x, "e4m3", gm, round_sf=round_sf, use_packed_ue8m0=packed)
    rq, rsf = ref_cast(x, "e4m3", (gm, 1), round_sf=round_sf, use_packed_ue8m0=packed)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("opt", list(OPTIONS))
def test_special_values(seed, dtype, opt):
    round_sf, packed = OPTIONS[opt]
    x = _input(256, 384, dtype)
    x[:, 0] = 0.0  # an all-zero column: amax floor 1e-4
    x[:128, 1] = -0.0
    x[5, 2] = 448.0 * 2**100  # one huge value dominates its column block
    x[:, 3] = 2.0**-130 if dtype == torch.float32 else 2.0**-120  # subnormal / tiny columns
    x[7, 4] = float("nan")  # NaN: not counted in the amax, encoded as 0x7F
    x[9, 5] = float("inf")  # inf: amax inf, sf inf, data NaN-free per the reference
    q, sf = kernelkiln.quant.per_channel_cast(x, "e4m3", 128, round_sf=round_sf, use_packed_ue8m0=packed)
    rq, rsf = ref_cast(x, "e4m3", (128, 1), round_sf=round_sf, use_packed_ue8m0=packed)
    _assert_bitwise(q[:, :5], rq[:, :5], "special data")
    _assert_bitwise(sf[:, :5], rsf[:, :5], "special scales")
    _assert_bitwise(q[:, 6:], rq[:, 6:], "other data")


def test_empty_and_poisoned_outputs_are_fully_written(seed):
    x = torch.empty((0, 256), dtype=torch.bfloat16, device="cuda")
    q, sf = kernelkiln.quant.per_channel_cast(x, "e4m3", 128)
    assert q.shape == (0, 256) and sf.shape == (0, 256)
    # Fill the caching allocator's free blocks with 0xFF first, so an unwritten byte would show.
    junk = torch.full((1 << 24,), 0xFF, dtype=torch.uint8, device="cuda")
    del junk
    x = _input(640, 2048, torch.bfloat16)
    q, sf = kernelkiln.quant.per_channel_cast(x, "e4m3", 128, round_sf=True, use_packed_ue8m0=True)
    rq, rsf = ref_cast(x, "e4m3", (128, 1), round_sf=True, use_packed_ue8m0=True)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "packed scales with zero padding bytes")
