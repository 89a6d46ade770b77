"""per_block_cast (+ sf-only / precomputed) on the GPU against the bit-exact reference (kernelkiln.torch.cast)."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from bitwise import assert_bitwise as _assert_bitwise  # noqa: E402

pytestmark = pytest.mark.gpu

SCALE_OPTIONS = {  # name -> (round_sf, use_packed_ue8m0, col_major)
    "fp32": (False, False, False),
    "fp32-round": (True, False, False),
    "fp32-col": (False, False, True),
    "ue8m0": (True, True, False),
    "ue8m0-col": (True, True, True),
}
BLOCKS = [(128, 128), (32, 32), (128, 32), (32, 128)]


def _input(t, h, dtype, stride=None):
    # Magnitudes spread over binades per row, so blocks of one block row differ in scale.
    x = torch.randn(t, stride or h, device="cuda") * torch.exp2(torch.randint(-8, 8, (t, 1), device="cuda").float())
    return x.to(dtype)[:, :h]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
@pytest.mark.parametrize("shape", [(128, 128), (256, 7168), (1, 64), (200, 576), (4096, 2048)])
def test_per_block_cast_matches_reference(seed, dtype, fmt, block, opt, shape):
    round_sf, packed, col = SCALE_OPTIONS[opt]
    x = _input(*shape, dtype)
    q, sf = kernelkiln.quant.per_block_cast(x, fmt, block, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                          use_packed_ue8m0=packed)
    rq, rsf = ref_cast(x, fmt, block, round_sf=round_sf, use_tma_aligned_col_major_sf=col, use_packed_ue8m0=packed)
    _assert_bitwise(q, rq, "data")
    assert sf.stride() == rsf.stride(), f"sf strides {sf.stride()} != reference {rsf.stride()}"
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_special_values(fmt):
    # +-0, the format max (exact), subnormal-range values, a zero block and a tiny block (amax floor).
    x = torch.zeros(256, 256, device="cuda")
    fmt_max = 448.0 if fmt == "e4m3" else 6.0
    x[0, 0], x[1, 1], x[2, 2] = fmt_max, -fmt_max, -0.0
    x[3, :64] = torch.linspace(-1, 1, 64, device="cuda") * 2.0 ** -9  # e4m3 subnormals after scaling
    x[128:, 128:] = 1e-30  # below the amax floor
    x[130, 130] = -0.0
    for dtype in (torch.bfloat16, torch.float32):
        xd = x.to(dtype)
        for round_sf in (False, True):
            q, sf = kernelkiln.quant.per_block_cast(xd, fmt, (128, 128), round_sf=round_sf)
            rq, rsf = ref_cast(xd, fmt, (128, 128), round_sf=round_sf)
            _assert_bitwise(q, rq, "data")
            _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_strided_rows_and_poisoned_out(seed, fmt):
    x = _input(384, 7168, torch.bfloat16, stride=7168 + 64)
    assert not x.is_contiguous()
    q = torch.full((384, 7168 if fmt == "e4m3" else 3584), -1, dtype=torch.int8, device="cuda")
    q = q.view(torch.float8_e4m3fn) if fmt == "e4m3" else q
    sf = torch.full((3, 56), float("nan"), device="cuda")
    out = kernelkiln.quant.per_block_cast(x, fmt, (128, 128), out=(q, sf))
    assert out[0] is q and out[1] is sf
    rq, rsf = ref_cast(x.contiguous(), fmt, (128, 128))
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
@pytest.mark.parametrize("block", [(128, 128), (32, 32)])
def test_sf_only_matches(seed, opt, block):
    round_sf, packed, col = SCALE_OPTIONS[opt]
    x = _input(512, 4096, torch.bfloat16)
    sf = kernelkiln.quant.per_block_cast_with_sf_only(x, "e4m3", block, use_tma_aligned_col_major_sf=col,
                                                    round_sf=round_sf, use_packed_ue8m0=packed)
    _, rsf = ref_cast(x, "e4m3", block, round_sf=round_sf, use_tma_aligned_col_major_sf=col, use_packed_ue8m0=packed)
    _assert_bitwise(sf, rsf, "scales")


def test_sf_only_into_out_sf(seed):
    x = _input(256, 2048, torch.float32)
    out_sf = torch.full((8, 16), float("nan"), device="cuda")
    assert kernelkiln.quant.per_block_cast_with_sf_only(x, "e2m1", (32, 128), out_sf=out_sf) is out_sf
    _, rsf = ref_cast(x, "e2m1", (32, 128))
    _assert_bitwise(out_sf, rsf, "scales")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("block", [(128, 128), (32, 32)])
def test_precomputed_sf_matches(seed, dtype, fmt, block):
    x = _input(256, 2048, dtype)
    _, sf = ref_cast(x, fmt, block, round_sf=True)
    q = kernelkiln.quant.per_block_cast_with_precomputed_sf(x, fmt, block, sf)
    rq = ref_cast(x, fmt, block, sf=sf)
    _assert_bitwise(q, rq, "data")


def test_zero_tokens_returns_empty():
    x = torch.empty(0, 7168, dtype=torch.bfloat16, device="cuda")
    q, sf = kernelkiln.quant.per_block_cast(x, "e4m3", (128, 128))
    assert q.shape == (0, 7168) and sf.shape == (0, 56)


def test_repeatable_run_to_run(seed):
    x = _input(1024, 7168, torch.bfloat16)
    a = kernelkiln.quant.per_block_cast(x, "e2m1", (32, 32), round_sf=True, use_packed_ue8m0=True)
    b = kernelkiln.quant.per_block_cast(x, "e2m1", (32, 32), round_sf=True, use_packed_ue8m0=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_torch_compile_goes_through_the_custom_op(seed):
    x = _input(256, 1024, torch.bfloat16)
    f = torch.compile(lambda t: kernelkiln.quant.per_block_cast(t, "e4m3", (128, 128), round_sf=True), fullgraph=True)
    q, sf = f(x)
    rq, rsf = ref_cast(x, "e4m3", (128, 128), round_sf=True)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")
