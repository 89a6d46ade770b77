"""per_token_cast on the GPU against the bit-exact reference (kernelkiln.torch.cast)."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from bitwise import assert_bitwise as _assert_bitwise  # noqa: E402

pytestmark = pytest.mark.gpu

SCALE_OPTIONS = {  # name -> (round_sf, use_packed_ue8m0, use_e4m3_sf, col_major)
    "fp32": (False, False, False, False),
    "fp32-round": (True, False, False, False),
    "fp32-round-col": (True, False, False, True),
    "ue8m0": (True, True, False, False),
    "ue8m0-col": (True, True, False, True),
    "e4m3sf": (False, False, True, False),
}


def _input(t, h, dtype, stride=None):
    # Spread magnitudes over many binades so that scale and rounding paths all fire.
    x = torch.randn(t, stride or h, device="cuda") * torch.exp2(torch.randint(-8, 8, (t, 1), device="cuda").float())
    return x.to(dtype)[:, :h]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("g", [16, 32, 64, 128])
@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
@pytest.mark.parametrize("shape", [(1, 64), (7, 576), (130, 7168), (4099, 2048)])
def test_per_token_cast_matches_reference(seed, dtype, fmt, g, opt, shape):
    round_sf, packed, e4m3sf, col = SCALE_OPTIONS[opt]
    # The first call validates and builds a launch plan; the second takes the plan (fresh input).
    for _ in range(2):
        x = _input(*shape, dtype)
        q, sf = kernelkiln.quant.per_token_cast(x, fmt, g, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                              use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
        rq, rsf = ref_cast(x, fmt, (1, g), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                           use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
        _assert_bitwise(q, rq, "data")
        assert sf.stride() == rsf.stride(), f"sf strides {sf.stride()} != reference {rsf.stride()}"
        _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
def test_one_launch_plan_serves_other_token_counts(seed, fmt, opt):
    """The plan (keyed on hidden size, strides, options) packs only its per-call values: pointers, the token
    count, the row blocks and, for column-major or padded packed scales, their T-dependent strides."""
    round_sf, packed, e4m3sf, col = SCALE_OPTIONS[opt]
    for t in (130, 1, 4099, 17, 130):
        x = _input(t, 2048, torch.bfloat16)
        q, sf = kernelkiln.quant.per_token_cast(x, fmt, 32, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                              use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
        rq, rsf = ref_cast(x, fmt, (1, 32), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                           use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
        _assert_bitwise(q, rq, f"data, T={t}")
        assert sf.stride() == rsf.stride(), f"T={t}: sf strides {sf.stride()} != reference {rsf.stride()}"
        _assert_bitwise(sf, rsf, f"scales, T={t}")


def test_launch_plan_reads_the_amax_clamp_at_each_call(seed):
    x = _input(64, 512, torch.bfloat16)
    x[3] = 0  # an all-zero row takes the clamp as its amax
    try:
        for clamp in (1e-4, 0.5, 1e-4):
            kernelkiln.set_amax_clamp_for_quant("e4m3", False, clamp)
            q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 128)
            rq, rsf = ref_cast(x, "e4m3", (1, 128), clamp_min_value=clamp)
            _assert_bitwise(sf, rsf, f"scales, clamp {clamp}")
            _assert_bitwise(q, rq, f"data, clamp {clamp}")
    finally:
        kernelkiln.config.reset_runtime_config()


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_strided_rows_and_poisoned_out(seed, fmt):
    x = _input(300, 7168, torch.bfloat16, stride=7168 + 64)
    assert not x.is_contiguous()
    q = torch.full((300, 7168 if fmt == "e4m3" else 3584), -1, dtype=torch.int8, device="cuda")
    q = q.view(torch.float8_e4m3fn) if fmt == "e4m3" else q
    sf = torch.full((300, 56), float("nan"), device="cuda")
    out = kernelkiln.quant.per_token_cast(x, fmt, 128, out=(q, sf))
    assert out[0] is q and out[1] is sf
    rq, rsf = ref_cast(x.contiguous(), fmt, (1, 128))
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("col", [False, True])
def test_more_row_blocks_than_grid_y_allows(seed, col):
    """The FP8 cast with fp32 scales puts its row blocks in grid y (at most 65535): a longer input runs in chunks.
    Plan path and general path (out=), both layouts of the scales; the last chunk is partial."""
    from kernelkiln.quant import _per_token
    rows = _per_token.rows_for("bfloat16", "e4m3")
    t = _per_token.MAX_GRID_Y * rows + 3 * rows + 5
    x = _input(t, 64, torch.bfloat16)
    rq, rsf = ref_cast(x, "e4m3", (1, 32), use_tma_aligned_col_major_sf=col)
    for _ in range(2):  # the first call validates, the second takes the launch plan's fallback
        q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 32, use_tma_aligned_col_major_sf=col)
        _assert_bitwise(q, rq, "data")
        _assert_bitwise(sf, rsf, "scales")
    if not col:
        q = torch.full((t, 64), float("nan"), device="cuda").to(torch.float8_e4m3fn)
        sf = torch.full((t, 2), float("nan"), device="cuda")
        kernelkiln.quant.per_token_cast(x, "e4m3", 32, out=(q, sf))
        _assert_bitwise(q, rq, "data")
        _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("opt", ["fp32", "ue8m0-col", "e4m3sf"])
def test_sf_only_matches(seed, opt):
    round_sf, packed, e4m3sf, col = SCALE_OPTIONS[opt]
    x = _input(513, 4096, torch.bfloat16)
    sf = kernelkiln.quant.per_token_cast_with_sf_only(x, "e4m3", 128, use_tma_aligned_col_major_sf=col,
                                                    round_sf=round_sf, use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
    _, rsf = ref_cast(x, "e4m3", (1, 128), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                      use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("e4m3sf", [False, True])
def test_precomputed_sf_matches(seed, fmt, e4m3sf):
    x = _input(257, 2048, torch.float32)
    _, sf = ref_cast(x, fmt, (1, 32), use_e4m3_sf=e4m3sf)
    sf = sf.cuda()
    q = kernelkiln.quant.per_token_cast_with_precomputed_sf(x, fmt, 32, sf, use_e4m3_sf=e4m3sf)
    rq = ref_cast(x, fmt, (1, 32), sf=sf, use_e4m3_sf=e4m3sf)
    _assert_bitwise(q, rq, "data")


def test_zero_tokens_returns_empty():
    x = torch.empty(0, 7168, dtype=torch.bfloat16, device="cuda")
    q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 128)
    assert q.shape == (0, 7168) and sf.shape == (0, 56)


def test_repeatable_run_to_run(seed):
    x = _input(1000, 7168, torch.bfloat16)
    a = kernelkiln.quant.per_token_cast(x, "e2m1", 32, round_sf=True, use_packed_ue8m0=True)
    b = kernelkiln.quant.per_token_cast(x, "e2m1", 32, round_sf=True, use_packed_ue8m0=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _prequantized(t, h, in_fmt, in_sf, block, col_major=False):
    """A valid (data, sf) input: the reference's own quantization of fresh random values."""
    x = _input(t, h, torch.float32)
    ue8m0 = in_sf == "ue8m0"
    return ref_cast(x, in_fmt, block, round_sf=ue8m0, use_packed_ue8m0=ue8m0, use_e4m3_sf=in_sf == "e4m3",
                    use_tma_aligned_col_major_sf=col_major)


@pytest.mark.parametrize("in_fmt,in_sf", [("e4m3", "fp32"), ("e4m3", "ue8m0"), ("e2m1", "ue8m0"), ("e2m1", "e4m3"),
                                          ("e2m1", "fp32")])
@pytest.mark.parametrize("block", [(1, 32), (1, 128), (128, 128), (32, 32)])
@pytest.mark.parametrize("fmt,g", [("e4m3", 128), ("e4m3", 32), ("e2m1", 32)])
@pytest.mark.parametrize("ue8m0_out", [False, True])
def test_requantize_matches_reference(seed, in_fmt, in_sf, block, fmt, g, ue8m0_out):
    x = _prequantized(300, 2048, in_fmt, in_sf, block)
    opts = dict(round_sf=ue8m0_out, use_packed_ue8m0=ue8m0_out)
    q, sf = kernelkiln.quant.per_token_cast(x, fmt, g, x_block_size=block, **opts)
    rq, rsf = ref_cast(x, fmt, (1, g), x_block_size=block, **opts)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


def test_requantize_column_major_input_scales(seed):
    x = _prequantized(300, 7168, "e4m3", "ue8m0", (1, 128), col_major=True)
    assert x[1].stride(0) == 1
    q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 32, x_block_size=(1, 128))
    rq, rsf = ref_cast(x, "e4m3", (1, 32), x_block_size=(1, 128))
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("g", [32, 128])
@pytest.mark.parametrize("opt", ["fp32", "ue8m0-col"])
@pytest.mark.parametrize("shape", [(1, 64), (130, 7168), (4099, 2048)])
def test_stochastic_cast_matches_reference(seed, dtype, g, opt, shape):
    round_sf, packed, e4m3sf, col = SCALE_OPTIONS[opt]
    x = _input(*shape, dtype)
    q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", g, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                          use_packed_ue8m0=packed, stochastic_cast=True)
    rq, rsf = ref_cast(x, "e4m3", (1, g), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                       use_packed_ue8m0=packed, stochastic=True)
    _assert_bitwise(q, rq, "data")
    _assert_bitwise(sf, rsf, "scales")
    q2, _ = kernelkiln.quant.per_token_cast(x, "e4m3", g, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                          use_packed_ue8m0=packed, stochastic_cast=True)
    _assert_bitwise(q2, q, "deterministic rerun")


def test_stochastic_cast_is_unbiased(seed):
    # Values strictly between two e4m3 neighbours: P(rounded below the value) must be ~1/2 on
    # average (check_bias of docs/SPEC.md §7: |P - 0.5| < 10 / sqrt(n)).
    x = (torch.rand(4096, 2048, device="cuda") * 2 - 1) * 300
    q, sf = kernelkiln.quant.per_token_cast(x, "e4m3", 128, round_sf=True, stochastic_cast=True)
    decoded = q.float() * sf.repeat_interleave(128, dim=1)
    inexact = decoded != x
    n = int(inexact.sum())
    p_below = float((decoded < x)[inexact].float().mean())
    assert n > 10000 and abs(p_below - 0.5) < 10 / n ** 0.5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
def test_blocks_holding_inf(seed, dtype, fmt, opt):
    """A block with +-inf gets the scale +inf (UE8M0 byte 255 when packed); its finite values quantize to signed
    zeros and the infs to NaN, as x / inf gives (before, the rounded scale's inverse wrapped to -inf and the finite
    values were stored as -+448 with flipped signs)."""
    round_sf, packed, e4m3sf, col = SCALE_OPTIONS[opt]
    x = _input(9, 256, dtype)
    x[0, 2], x[3, 130], x[5, 0], x[5, 200] = float("inf"), float("-inf"), float("inf"), float("-inf")
    for g in (32, 128):
        q, sf = kernelkiln.quant.per_token_cast(x, fmt, g, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                                use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
        rq, rsf = ref_cast(x, fmt, (1, g), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                           use_packed_ue8m0=packed, use_e4m3_sf=e4m3sf)
        _assert_bitwise(q, rq, "data")
        _assert_bitwise(sf, rsf, "scales")
