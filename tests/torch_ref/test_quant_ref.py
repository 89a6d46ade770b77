"""CPU tests of the quantization references in kernelkiln.torch.quant.

The strongest check is ``test_matches_scalar_oracle``: an independent
pure-Python model of the spec (struct-rounded fp32 arithmetic, nearest-value
search on the format grids) must agree bit for bit with the torch code.
"""

import bisect
import math
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelkiln.torch import (
    cast,
    cast_back,
    default_clamp_min,
    get_sf_shape,
    pack_e2m1,
    per_token_cast_ref,
    unpack_from_e2m1fn_x2,
)

FMT_MAX = {'e4m3': 448.0, 'e2m1': 6.0}
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NAN = float('nan')
INF = float('inf')

# database=None: nothing is written into the repository; failures print their example.
PROPERTY = settings(max_examples=60, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------ scalar oracle

def f32(v):
    """Round a Python float to fp32. Exact-then-round-once for +,-,*,/ of fp32 operands."""
    return struct.unpack('<f', struct.pack('<f', v))[0]


def f32_bits(v):
    return struct.unpack('<I', struct.pack('<f', v))[0]


def _e4m3_value(byte):
    exp, man = (byte >> 3) & 0xF, byte & 0x7
    mag = man * 2.0**-9 if exp == 0 else (1 + man / 8) * 2.0**(exp - 7)
    return -mag if byte & 0x80 else mag


# Finite non-negative e4m3 values; the index equals the byte, so ties go to even index.
E4M3_POS = [_e4m3_value(b) for b in range(0x7F)]


def _nearest_even(grid, a):
    """Index of the grid value nearest to a >= 0; ties to the even index; saturating."""
    i = bisect.bisect_left(grid, a)
    if i == len(grid):
        return len(grid) - 1
    if grid[i] == a or i == 0:
        return i
    lo, hi = grid[i - 1], grid[i]
    if a - lo < hi - a:
        return i - 1
    if hi - a < a - lo:
        return i
    return i - 1 if (i - 1) % 2 == 0 else i


def oracle_e4m3_byte(y):
    if math.isnan(y):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, y) < 0 else 0
    return sign | _nearest_even(E4M3_POS, abs(y))


def oracle_e2m1_nibble(y):
    if math.isnan(y):
        return 7
    sign = 8 if math.copysign(1.0, y) < 0 else 0
    return sign | _nearest_even(E2M1_GRID, abs(y))


def oracle_scale(amax, fmt, mode):
    """(sf as a Python float, sf_inv) following the spec, fp32 rounding via struct."""
    fmt_max = FMT_MAX[fmt]
    if mode == 'round':
        sf0 = f32(amax * f32(1.0 / fmt_max))
        mantissa, exp = math.frexp(sf0)  # sf0 = mantissa * 2**exp, mantissa in [0.5, 1)
        e = exp - 1 if mantissa == 0.5 else exp
        return 2.0**e, 2.0**-e
    if mode == 'e4m3sf':
        sf = abs(_e4m3_value(oracle_e4m3_byte(f32(amax / fmt_max))))
        return sf, f32(1.0 / sf)
    return f32(amax / fmt_max), f32(fmt_max / amax)


def oracle_cast(x, fmt, block, mode):
    """Python-loop model of cast(); returns (list of output codes per row, sf floats)."""
    rows = x.float().tolist()
    t, h = len(rows), len(rows[0])
    gm, g = block
    clamp = f32(default_clamp_min(fmt, mode == 'e4m3sf'))
    mb, kb = -(-t // gm), -(-h // g)
    sf = [[0.0] * kb for _ in range(mb)]
    codes = [[0] * h for _ in range(t)]
    for bi in range(mb):
        for bj in range(kb):
            cells = [(r, c) for r in range(bi * gm, min(t, bi * gm + gm))
                     for c in range(bj * g, min(h, bj * g + g))]
            amax = max((abs(rows[r][c]) for r, c in cells if not math.isnan(rows[r][c])), default=0.0)
            s, s_inv = oracle_scale(max(amax, clamp), fmt, mode)
            sf[bi][bj] = s
            for r, c in cells:
                y = f32(rows[r][c] * s_inv)
                codes[r][c] = oracle_e4m3_byte(y) if fmt == 'e4m3' else oracle_e2m1_nibble(y)
    return codes, sf


# ------------------------------------------------------------ helpers

def codes_of(q, fmt):
    """Per-element output codes: e4m3 bytes, or e2m1 nibbles (low nibble first)."""
    if fmt == 'e4m3':
        return q.view(torch.uint8).tolist()
    b = q.view(torch.uint8).to(torch.int64)
    return torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2).tolist()


def decode(q, fmt):
    return q.float() if fmt == 'e4m3' else unpack_from_e2m1fn_x2(q)


def expand(sf, block, shape):
    gm, g = block
    return sf.float().repeat_interleave(gm, 0)[:shape[0]].repeat_interleave(g, 1)[:, :shape[1]]


def random_input(seed, t, h, dtype, log2_scale, specials=False):
    """Random normal data times 2**log2_scale, with per-row magnitude spread."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=gen)
    x = x * torch.exp2(torch.randint(-4, 5, (t, 1), generator=gen).float() + log2_scale)
    if specials:
        pick = torch.rand(t, h, generator=gen)
        x = torch.where(pick < 0.05, torch.zeros_like(x), x)
        x = torch.where((pick >= 0.05) & (pick < 0.08), torch.full_like(x, NAN), x)
    return x.to(dtype)


MODES = {'plain': {}, 'round': {'round_sf': True}, 'e4m3sf': {'use_e4m3_sf': True}}

shapes = st.tuples(st.integers(1, 6), st.integers(1, 40).map(lambda n: 2 * n))
blocks = st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([2, 8, 16, 24, 32]))


# ------------------------------------------------------------ oracle agreement

@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), shape=shapes, block=blocks,
       fmt=st.sampled_from(['e4m3', 'e2m1']), mode=st.sampled_from(sorted(MODES)),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), log2_scale=st.integers(-20, 20),
       specials=st.booleans())
def test_matches_scalar_oracle(seed, shape, block, fmt, mode, dtype, log2_scale, specials):
    x = random_input(seed, *shape, dtype, log2_scale, specials)
    q, sf = cast(x, fmt, block, **MODES[mode])
    want_codes, want_sf = oracle_cast(x, fmt, block, mode)
    assert codes_of(q, fmt) == want_codes
    assert sf.float().tolist() == want_sf


# ------------------------------------------------------------ exact spot checks

def test_e2m1_ties_specials_and_saturation():
    # sf = 1 makes the multiplier exactly 1, so each input is rounded as is.
    vals = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.0, NAN, INF,
            -INF, 7.0, -0.2, 0.2, 6.0, -6.0, 100.0, -NAN, 0.0, -2.5]
    want = [0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x8, 0x7, 0x7,
            0xF, 0x7, 0x8, 0x0, 0x7, 0xF, 0x7, 0x7, 0x0, 0xC]
    x = torch.tensor([vals])
    q = cast(x, 'e2m1', (1, 32), sf=torch.ones(1, 1))
    assert q.dtype == torch.int8 and q.shape == (1, 10)
    assert codes_of(q, 'e2m1') == [want]


def test_e4m3_ties_specials_and_saturation():
    vals = [1.0625, 1.1875, 500.0, -500.0, -0.0, NAN, -NAN, 2.0**-10, 3 * 2.0**-10, 464.0, 2.0**-7]
    # 1.0625 ties to 1.0 (even mantissa), 1.1875 to 1.25; beyond 448 saturates;
    # 2^-10 ties to 0, 3*2^-10 ties to 2^-8 (byte 2); 2^-7 is subnormal 4*2^-9.
    want = [0x38, 0x3A, 0x7E, 0xFE, 0x80, 0x7F, 0x7F, 0x00, 0x02, 0x7E, 0x04]
    q = cast(torch.tensor([vals]), 'e4m3', (1, 16), sf=torch.ones(1, 1))
    assert q.dtype == torch.float8_e4m3fn
    assert q.view(torch.uint8).tolist() == [want]


@pytest.mark.parametrize('fmt', ['e4m3', 'e2m1'])
def test_plain_scale_and_inverse_are_direct_divisions(fmt):
    x = torch.tensor([[3.0, -1.0, 0.5, 0.25]])
    q, sf = cast(x, fmt, (1, 4))
    fmt_max = torch.tensor(FMT_MAX[fmt])
    assert sf.item() == (torch.tensor(3.0) / fmt_max).item()
    # The multiplier is fmt_max / amax, not 1 / sf: the max element maps to fmt_max exactly.
    assert decode(q, fmt)[0, 0].item() == FMT_MAX[fmt]


def _next_up(v):
    return struct.unpack('<f', struct.pack('<I', f32_bits(v) + 1))[0]


def test_sf_inv_is_fmt_max_over_amax_not_reciprocal_of_sf():
    # Find an amax where 448/amax and 1/(amax/448) differ in fp32, then an x whose
    # scaled value sits on an e4m3 rounding tie for one multiplier and not the other.
    amax = 1.0
    while f32(448.0 / amax) == f32(1.0 / f32(amax / 448.0)):
        amax = _next_up(amax)
    direct, via_sf = f32(448.0 / amax), f32(1.0 / f32(amax / 448.0))
    found = None
    for lo, hi in zip(E4M3_POS[64:], E4M3_POS[65:]):
        x = f32((lo + hi) / 2 / direct)
        for _ in range(8):
            want = oracle_e4m3_byte(f32(x * direct))
            if want != oracle_e4m3_byte(f32(x * via_sf)):
                found = (x, want)
                break
            x = _next_up(x)
        if found:
            break
    assert found is not None
    x, want = found
    q, _ = cast(torch.tensor([[amax, x]]), 'e4m3', (1, 2))
    assert q.view(torch.uint8)[0, 1].item() == want


@pytest.mark.parametrize('fmt', ['e4m3', 'e2m1'])
@pytest.mark.parametrize('k', [-20, -3, 0, 1, 7, 30])
def test_round_sf_exact_powers_of_two_map_to_themselves(fmt, k):
    base = FMT_MAX[fmt] * 2.0**k
    above = torch.nextafter(torch.tensor(base), torch.tensor(INF)).item()
    x = torch.tensor([[base] + [base / 4] * 15, [above] + [base / 4] * 15])
    _, sf = cast(x, fmt, (1, 16), round_sf=True)
    assert sf[:, 0].tolist() == [2.0**k, 2.0**(k + 1)]


def test_ue8m0_packing_byte_order_and_zero_padding():
    exps = [-3, 0, 5, -10, 2]  # one per 32-wide block; 5 blocks -> 2 words
    x = torch.cat([torch.full((2, 32), 448.0 * 2.0**e) for e in exps], dim=1)
    x[1] *= 2
    _, sf = cast(x, 'e4m3', (1, 32), round_sf=True, use_packed_ue8m0=True)
    assert sf.dtype == torch.int32 and sf.shape == (2, 2)
    for row, shift in ((0, 0), (1, 1)):
        b = [e + shift + 127 for e in exps] + [0, 0, 0]
        want = [sum(b[4 * w + i] << (8 * i) for i in range(4)) for w in range(2)]
        assert [v & 0xFFFFFFFF for v in sf[row].tolist()] == want


def test_ue8m0_col_pack_for_per_channel_blocks():
    # (gm, 1) blocks pack four token blocks per int32 along M (docs/SPEC.md §2.1).
    x = torch.cat([torch.full((4, 3), 448.0 * 2.0**e) for e in [1, 2, 3, 4, 5]], dim=0)
    _, sf = cast(x, 'e4m3', (4, 1), round_sf=True, use_packed_ue8m0=True)
    assert sf.shape == (2, 3)
    assert [v & 0xFFFFFFFF for v in sf[:, 0].tolist()] == [
        128 | 129 << 8 | 130 << 16 | 131 << 24, 132]


@pytest.mark.parametrize('t', [1, 5, 17])
@pytest.mark.parametrize('kw, align, dtype', [
    ({}, 4, torch.float32),
    ({'use_e4m3_sf': True}, 16, torch.float8_e4m3fn),
    ({'round_sf': True, 'use_packed_ue8m0': True}, 4, torch.int32),
])
def test_tma_col_major_layout(t, kw, align, dtype):
    x = random_input(t, t, 320, torch.bfloat16, 0)
    q_row, sf_row = cast(x, 'e4m3', (1, 32), **kw)
    q_col, sf_col = cast(x, 'e4m3', (1, 32), use_tma_aligned_col_major_sf=True, **kw)
    a = -(-t // align) * align
    assert sf_col.dtype == dtype and sf_col.shape == sf_row.shape
    assert sf_col.stride() == (1, a)
    assert torch.equal(q_col.view(torch.uint8), q_row.view(torch.uint8))
    assert torch.equal(sf_col.float(), sf_row.float())
    # Padding columns of the (K_sf, A) storage are zero.
    storage = sf_col.T
    full = torch.as_strided(storage, (storage.shape[0], a), (a, 1))
    assert (full[:, t:].float() == 0).all()


def test_partial_last_blocks_exclude_padding():
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(5, 80, generator=gen) + 0.1
    x[4, 70] = 300.0  # lives in the partial row block and the partial column block
    _, sf = cast(x, 'e4m3', (4, 32))
    assert sf.shape == (2, 3)
    for bi, rows in enumerate((slice(0, 4), slice(4, 5))):
        for bj, cols in enumerate((slice(0, 32), slice(32, 64), slice(64, 80))):
            amax = x[rows, cols].abs().max()
            assert sf[bi, bj].item() == (amax / torch.tensor(448.0)).item()


def test_amax_floor_and_nan_ignored_in_amax():
    # 2**-140 (an fp32 subnormal) is below every default floor.
    x = torch.tensor([[0.0] * 16 + [NAN] + [2.0**-140] * 15])
    for fmt, e4m3_sf in (('e4m3', False), ('e2m1', False), ('e4m3', True), ('e2m1', True)):
        _, sf = cast(x, fmt, (1, 16), use_e4m3_sf=e4m3_sf)
        want = f32(f32(default_clamp_min(fmt, e4m3_sf)) / FMT_MAX[fmt])
        assert sf.float().tolist() == [[want, want]]
    _, sf = cast(x, 'e4m3', (1, 16), clamp_min_value=2.0**-20)
    assert sf[0, 0].item() == f32(2.0**-20 / 448)


def test_default_clamp_min_values():
    assert default_clamp_min('e4m3', False) == 1e-4
    assert default_clamp_min('e4m3', True) == 0.875
    assert default_clamp_min('e2m1', False) == 6 * 2.0**-126
    assert default_clamp_min('e2m1', True) == 0.01171875


def test_get_sf_shape():
    assert get_sf_shape((5, 80), (4, 32)) == (2, 3)
    assert get_sf_shape((128, 7168), (1, 128)) == (128, 56)
    assert get_sf_shape((256, 256), (128, 128)) == (2, 2)


def test_unpack_all_bytes_and_pack_roundtrip():
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8)
    vals = unpack_from_e2m1fn_x2(b.reshape(16, 16))
    assert vals.shape == (16, 32)
    table = list(E2M1_GRID) + [-v for v in E2M1_GRID]
    lo, hi = vals[:, 0::2].flatten().tolist(), vals[:, 1::2].flatten().tolist()
    for byte in range(256):
        assert lo[byte] == table[byte & 0xF] and hi[byte] == table[byte >> 4]
    assert math.copysign(1.0, unpack_from_e2m1fn_x2(torch.tensor([[8]], dtype=torch.int8))[0, 0]) < 0
    nibbles = torch.stack((b.view(torch.uint8) & 0xF, b.view(torch.uint8) >> 4), -1).flatten()
    assert torch.equal(pack_e2m1(nibbles), b)
    assert unpack_from_e2m1fn_x2(b, torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.parametrize('fmt, int_dtype, bits', [('bf16', torch.int16, 0x7FFF), ('fp32', torch.int32, 0x7FFFFFFF)])
def test_cast_back_nan_is_canonical(fmt, int_dtype, bits):
    # Both e4m3 NaN encodings (0x7F, 0xFF) decode to the NaN CUDA produces.
    data = torch.tensor([[0x7F, 0xFF, 0x38, 0xB8]], dtype=torch.uint8).view(torch.float8_e4m3fn)
    out = cast_back((data, torch.full((1, 1), 2.0)), fmt, (1, 4))
    assert out.view(int_dtype)[0, :2].tolist() == [bits, bits]
    assert out[0, 2:].float().tolist() == [2.0, -2.0]


def test_per_token_cast_ref_is_cast_with_row_blocks():
    x = random_input(7, 4, 256, torch.bfloat16, 0)
    q1, sf1 = per_token_cast_ref(x, 'e4m3', 64, round_sf=True)
    q2, sf2 = cast(x, 'e4m3', (1, 64), round_sf=True)
    assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(sf1, sf2)


# ------------------------------------------------------------ properties

def _error_bound(x, sf_full, fmt):
    """Per-element bound: half a grid step (relative + absolute) plus saturation excess."""
    rel, absolute = (2.0**-4, 2.0**-10) if fmt == 'e4m3' else (0.25, 0.25)
    saturation = (x.abs() - FMT_MAX[fmt] * sf_full).clamp(min=0)
    return rel * x.abs() + absolute * sf_full + saturation + 2.0**-20 * x.abs()


@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), shape=shapes, block=blocks,
       fmt=st.sampled_from(['e4m3', 'e2m1']), mode=st.sampled_from(sorted(MODES)),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), log2_scale=st.integers(-30, 30))
def test_decode_approximates_input(seed, shape, block, fmt, mode, dtype, log2_scale):
    x = random_input(seed, *shape, dtype, log2_scale).float()
    q, sf = cast(x, fmt, block, **MODES[mode])
    d = decode(q, fmt)
    assert torch.isfinite(d).all() and (d.abs() <= FMT_MAX[fmt]).all()
    sf_full = expand(sf, block, x.shape)
    assert ((d * sf_full - x).abs() <= _error_bound(x, sf_full, fmt)).all()
    back = cast_back((q, sf), 'fp32', block)
    assert torch.equal(back, d * sf_full)


@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), shape=shapes, block=blocks,
       fmt=st.sampled_from(['e4m3', 'e2m1']), log2_scale=st.integers(-30, 30))
def test_round_sf_scales_are_minimal_powers_of_two(seed, shape, block, fmt, log2_scale):
    x = random_input(seed, *shape, torch.float32, log2_scale)
    q, sf = cast(x, fmt, block, round_sf=True)
    bits = sf.view(torch.int32)
    assert ((bits & 0x807FFFFF) == 0).all()  # positive, mantissa zero
    amax = x.abs()
    gm, g = block
    mb, kb = sf.shape
    for bi in range(mb):
        for bj in range(kb):
            a = max(amax[bi * gm:(bi + 1) * gm, bj * g:(bj + 1) * g].max().item(),
                    f32(default_clamp_min(fmt)))
            sf0 = f32(a * f32(1 / FMT_MAX[fmt]))
            assert sf[bi, bj].item() / 2 < sf0 <= sf[bi, bj].item()
    # sf >= amax / fmt_max, so no value needs to saturate.
    assert (x.abs() <= FMT_MAX[fmt] * expand(sf, block, x.shape)).all()
    q2, packed = cast(x, fmt, block, round_sf=True, use_packed_ue8m0=True)
    assert torch.equal(cast_back((q2, packed), 'fp32', block), cast_back((q, sf), 'fp32', block))


@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), shape=shapes, fmt=st.sampled_from(['e4m3', 'e2m1']),
       log2_scale=st.integers(-8, 12))
def test_e4m3_sf_path(seed, shape, fmt, log2_scale):
    x = random_input(seed, *shape, torch.bfloat16, log2_scale)
    q, sf = cast(x, fmt, (1, 16), use_e4m3_sf=True)
    assert sf.dtype == torch.float8_e4m3fn
    amax = x.float().abs().reshape(x.shape[0], -1).split(16, dim=1)
    amax = torch.stack([a.amax(dim=1) for a in amax], dim=1)
    amax = torch.maximum(amax, torch.tensor(f32(default_clamp_min(fmt, True))))
    want = (amax / torch.tensor(FMT_MAX[fmt])).clamp(max=448).to(torch.float8_e4m3fn)
    assert torch.equal(sf.view(torch.uint8), want.view(torch.uint8))
    # Same data as quantizing with the e4m3 scales given explicitly (multiplier 1/sf).
    q_given = cast(x, fmt, (1, 16), sf=sf)
    assert torch.equal(q_given.view(torch.uint8), q.view(torch.uint8))


# ------------------------------------------------------------ quantized input

@pytest.mark.parametrize('in_fmt', ['e4m3', 'e2m1'])
@pytest.mark.parametrize('in_kw', [
    {}, {'round_sf': True}, {'round_sf': True, 'use_packed_ue8m0': True},
    {'use_tma_aligned_col_major_sf': True}, {'use_e4m3_sf': True},
    {'round_sf': True, 'use_packed_ue8m0': True, 'use_tma_aligned_col_major_sf': True},
])
@pytest.mark.parametrize('in_block', [(1, 32), (32, 32)])
def test_requantize_equals_dequantize_then_cast(in_fmt, in_kw, in_block):
    x = random_input(11, 40, 96, torch.bfloat16, 2)
    xq = cast(x, in_fmt, in_block, **in_kw)
    ref = cast_back(xq, 'fp32', in_block)
    q, sf = cast(xq, 'e4m3', (1, 16), x_block_size=in_block, round_sf=True)
    q_ref, sf_ref = cast(ref, 'e4m3', (1, 16), round_sf=True)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(sf, sf_ref)
    assert torch.equal(cast_back(xq, 'bf16', in_block), ref.to(torch.bfloat16))


@PROPERTY
@given(seed=st.integers(0, 2**31 - 1), log2_scale=st.integers(-10, 10))
def test_fp4_to_fp8_with_power_of_two_scales_is_lossless(seed, log2_scale):
    x = random_input(seed, 8, 128, torch.float32, log2_scale)
    fp4 = cast(x, 'e2m1', (1, 32), round_sf=True, use_packed_ue8m0=True)
    fp8 = cast(fp4, 'e4m3', (1, 32), x_block_size=(1, 32), round_sf=True)
    assert torch.equal(cast_back(fp8, 'fp32', (1, 32)), cast_back(fp4, 'fp32', (1, 32)))


# ------------------------------------------------------------ validation

X = torch.ones(4, 64)


@pytest.mark.parametrize('call, exc, words', [
    (lambda: cast(X, 'e5m2', (1, 32)), ValueError, 'fmt'),
    (lambda: cast(X, 'e4m3', 32), TypeError, 'block_size'),
    (lambda: cast(X, 'e4m3', (0, 32)), ValueError, 'block_size'),
    (lambda: cast(X, 'e4m3', (1, 32), round_sf=True, use_e4m3_sf=True), ValueError, 'round_sf'),
    (lambda: cast(X, 'e4m3', (1, 32), use_packed_ue8m0=True), ValueError, 'use_packed_ue8m0'),
    (lambda: cast(X.half(), 'e4m3', (1, 32)), TypeError, 'x dtype'),
    (lambda: cast(torch.ones(2, 63), 'e2m1', (1, 32)), ValueError, 'even'),
    (lambda: cast(X, 'e4m3', (1, 32), x_block_size=(1, 32)), ValueError, 'x_block_size'),
    (lambda: cast((X.to(torch.float8_e4m3fn), torch.ones(4, 2)), 'e4m3', (1, 32)), ValueError, 'x_block_size'),
    (lambda: cast((X.to(torch.float8_e4m3fn), torch.ones(4, 3)), 'e4m3', (1, 32), x_block_size=(1, 32)),
     ValueError, 'shape'),
    (lambda: cast(X, 'e4m3', (1, 32), sf=torch.ones(4, 2, dtype=torch.int32)), TypeError, 'sf'),
    (lambda: cast(X, 'e4m3', (1, 32), sf=torch.ones(2, 4).T), ValueError, 'row-major'),
    (lambda: cast(X, 'e4m3', (1, 32), sf=torch.ones(4, 3)), ValueError, 'shape'),
    (lambda: cast(X, 'e4m3', (1, 32), sf=torch.ones(4, 2), use_e4m3_sf=True), ValueError, 'use_e4m3_sf'),
    (lambda: cast(X, 'e4m3', (1, 32), clamp_min_value=0.0), ValueError, 'clamp_min_value'),
    (lambda: cast_back((X.to(torch.float8_e4m3fn), torch.ones(4, 2)), 'e4m3', (1, 32)), ValueError, 'fmt'),
    (lambda: pack_e2m1(torch.tensor([1, 16])), ValueError, '0..15'),
    (lambda: unpack_from_e2m1fn_x2(X), TypeError, 'int8'),
])
def test_argument_validation(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_cast_back_of_one_row_with_col_major_packed_scales():
    """A (1, k) col-major packed-UE8M0 sf has a size-1 dim with stride 4: decoding must not view it as bytes."""
    from kernelkiln.torch import cast, cast_back
    x = torch.randn(1, 256) * 3
    q, sf = cast(x, "e4m3", (1, 128), round_sf=True, use_packed_ue8m0=True, use_tma_aligned_col_major_sf=True)
    assert sf.shape == (1, 1) and sf.stride() == (1, 4)
    y = cast_back((q, sf), "fp32", (1, 128))
    assert torch.allclose(y, x, rtol=2 ** -3)


def test_packed_scales_of_zero_rows_decode():
    from kernelkiln.torch.quant import _unpack_ue8m0
    assert _unpack_ue8m0(torch.zeros(0, 2, dtype=torch.int32), (0, 7), 1).shape == (0, 7)


@pytest.mark.parametrize("round_sf, packed", [(True, False), (True, True), (False, False)])
def test_a_block_holding_inf_quantizes_to_signed_zeros(round_sf, packed):
    """The peer's bytes for the probe row [1, -2, inf, 3, ...] (e4m3, 1 x 32): +0, -0, NaN, +0 ... and the scale +inf
    (UE8M0 byte 255). Ours pins NaN to 0x7F (the GPU's canonical NaN; the peer's CPU reference gives 0xFF). With
    round_sf the scale's inverse used to wrap to -inf: the finite values came out as -+448 with flipped signs."""
    x = torch.tensor([[1.0, -2.0, float("inf"), 3.0] + [0.5] * 28])
    q, sf = cast(x, "e4m3", (1, 32), round_sf=round_sf, use_packed_ue8m0=packed)
    assert q.view(torch.uint8)[0, :5].tolist() == [0, 128, 127, 0, 0]
    if packed:
        assert sf.view(torch.uint8)[0, 0].item() == 255
    else:
        assert sf.item() == float("inf")


@pytest.mark.parametrize("block", [(128, 1), (1, 128), (128, 128)])
def test_zero_tokens_with_packed_scales_give_empty_tensors(block):
    """As the peer's reference: empty data and an empty packed-scale tensor of the peer's shape (it used to raise on
    viewing an empty byte tensor as int32 for (gm, 1) blocks)."""
    q, sf = cast(torch.randn(0, 256), "e4m3", block, round_sf=True, use_packed_ue8m0=True)
    assert q.shape == (0, 256) and sf.dtype == torch.int32 and sf.numel() == 0
    assert sf.shape == ((0, 256) if block == (128, 1) else (0, 1))
    assert sf.stride() == torch.empty(sf.shape).stride()
