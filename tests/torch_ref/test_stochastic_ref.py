"""CPU tests of the stochastic-rounding reference (kernelkiln.torch.stochastic) and quant.cast's oracle.

The hash and the rounding rule are re-derived here independently, in plain Python
integers and exact fractions, from the definitions in docs/SPEC.md §2.2 and
kernels/common/stochastic.py; the torch bit tricks must agree with them.
"""
import math
import struct
from fractions import Fraction

import pytest
import torch

from kernelkiln.torch import cast as ref_quant_cast
from kernelkiln.torch import stochastic as sr

M32 = 0xFFFFFFFF


def py_hash(words, q):
    h = (words[0] * 0x5671D42B + words[1] * 0x9995E499 + words[2] * 0xACE1B8A5 + words[3] * 0xE153538D + q) & M32
    h ^= h >> 23
    h = (h * 0x7FEB352D) & M32
    h ^= h >> 16
    r0 = (h * 0x846CA68B) & M32
    r1 = (h * 0xD35A2D97) & M32
    return r0 ^ (r0 >> 11), r1 ^ (r1 >> 11)


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def bits_f32(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def e4m3_value(byte):
    s = -1.0 if byte & 0x80 else 1.0
    e, m = (byte >> 3) & 0xF, byte & 7
    if e == 0xF and m == 7:
        return math.nan
    return s * (m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def py_round(value, r16, ulp_of, max_value):
    """The documented rule in exact arithmetic: up iff frac + r/2**16 >= 1, then satfinite."""
    a = Fraction(abs(value))
    u = ulp_of(a)
    k = math.floor(a / u)
    frac = a / u - k
    mag = (k + (1 if frac + Fraction(r16, 65536) >= 1 else 0)) * u
    return math.copysign(float(min(mag, Fraction(max_value))), value)


def e4m3_ulp(a):
    if a < Fraction(1, 64):
        return Fraction(1, 512)
    e = math.floor(math.log2(a))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return Fraction(2) ** (e - 3)


def bf16_ulp(a):
    if a < Fraction(2) ** -126:
        return Fraction(2) ** -133
    e = math.floor(math.log2(a))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    return Fraction(2) ** (e - 7)


BF16_MAX = bits_f32(0x7F7F0000)


def _spread(n, gen=None):
    """fp32 values over many binades, e4m3 subnormals and fp32 subnormals included."""
    x = torch.randn(n, generator=gen) * torch.exp2(torch.randint(-20, 12, (n,), generator=gen).float())
    x[::97] = torch.randn(x[::97].shape, generator=gen) * 2.0**-130  # fp32 subnormals
    return x


def test_hash_matches_independent_python():
    g = torch.Generator().manual_seed(1)
    x = _spread(4 * 257, g)
    r0, r1 = sr.quad_random_bits(sr.fp32_bits(x), quad_offset=(1 << 32) - 100)
    for j in range(0, 257, 7):
        words = [f32_bits(v) for v in x[4 * j:4 * j + 4].tolist()]
        e0, e1 = py_hash(words, ((1 << 32) - 100 + j) & M32)
        assert (int(r0[j]), int(r1[j])) == (e0, e1), j


def test_hash_known_vector():
    # Quad (1.0, -2.0, 0.5, 0.0) at q = 3, computed by hand from the §2.2 formula.
    words = [0x3F800000, 0xC0000000, 0x3F000000, 0]
    r0, r1 = sr.quad_random_bits(torch.tensor(words, dtype=torch.int64), quad_offset=3)
    assert (int(r0[0]), int(r1[0])) == py_hash(words, 3)


def test_bf16_rounding_matches_exact_rule():
    g = torch.Generator().manual_seed(2)
    x = torch.cat([_spread(3000, g), torch.tensor([BF16_MAX * 1.0039, 3.3e38, -3.4e38, 0.0, -0.0])])
    r16 = torch.randint(0, 65536, x.shape, generator=g)
    got = sr.bf16_bits_stochastic(sr.fp32_bits(x), r16)
    for v, r, b in zip(x.tolist(), r16.tolist(), got.tolist()):
        expected = py_round(v, r, bf16_ulp, BF16_MAX)
        actual = bits_f32(b << 16)
        assert actual == expected and math.copysign(1, actual) == math.copysign(1, expected), (v, r, hex(b))


def test_e4m3_rounding_matches_exact_rule():
    g = torch.Generator().manual_seed(3)
    x = torch.cat([_spread(3000, g) * 2.0**-4, torch.tensor([447.9, 460.0, 1e6, -0.0, 0.0, 2.0**-6, 2.0**-10])])
    r16 = torch.randint(0, 65536, x.shape, generator=g)
    got = sr.e4m3_byte_stochastic(sr.fp32_bits(x), r16)
    for v, r, b in zip(x.tolist(), r16.tolist(), got.tolist()):
        expected = py_round(v, r, e4m3_ulp, 448.0)
        actual = e4m3_value(b)
        assert actual == expected and math.copysign(1, actual) == math.copysign(1, expected), (v, r, hex(b))


def test_special_values():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([inf, -inf, nan, -nan, 0.0, -0.0])
    r16 = torch.full(x.shape, 0xFFFF, dtype=torch.int64)
    bf = sr.bf16_bits_stochastic(sr.fp32_bits(x), r16).tolist()
    assert bf == [0x7F7F, 0xFF7F, 0x7FFF, 0x7FFF, 0x0000, 0x8000]
    e4 = sr.e4m3_byte_stochastic(sr.fp32_bits(x), r16).tolist()
    assert e4 == [0x7E, 0xFE, 0x7F, 0x7F, 0x00, 0x80]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_exact_values_stay_exact_for_every_random_word(dtype):
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[~torch.isnan(grid)]  # e4m3 values are exact in bf16 too
    for r in (0, 1, 0x7FFF, 0x8000, 0xFFFF):
        r16 = torch.full(grid.shape, r, dtype=torch.int64)
        fn = sr.bf16_bits_stochastic if dtype == torch.bfloat16 else sr.e4m3_byte_stochastic
        out = fn(sr.fp32_bits(grid), r16)
        back = (out.to(torch.int32) << 16).view(torch.float32) if dtype == torch.bfloat16 else \
            out.to(torch.uint8).view(torch.float8_e4m3fn).float()
        assert torch.equal(back, grid)


@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float32, torch.bfloat16), (torch.float32, torch.float8_e4m3fn),
                                                (torch.bfloat16, torch.float8_e4m3fn)])
def test_results_are_neighbours_and_unbiased(in_dtype, out_dtype):
    g = torch.Generator().manual_seed(4)
    # One value per row, repeated over many quads: each quad index gives fresh random bits.
    vals = (torch.rand(8, generator=g) * 7 + 0.3) * torch.tensor([1, -1, 1, -1, 1e-2, -3e-3, 30, -50.0])  # < 448
    vals = vals.to(in_dtype).float()
    n = 4096
    x = vals.repeat_interleave(n).to(in_dtype)
    y = sr.cast_dtype(x, out_dtype, stochastic_rounding=True).float().view(8, n)
    lo = sr.cast_dtype(vals, out_dtype).float()  # RNE neighbour; the other one is found from the outputs
    for i in range(8):
        distinct = torch.unique(y[i])
        assert distinct.numel() <= 2, distinct
        down = torch.minimum(distinct.min(), lo[i])
        up = torch.maximum(distinct.max(), lo[i])
        if up == down:
            continue
        # neighbours: the value lies between them and nothing representable lies in between
        assert down <= vals[i] <= up
        mid = ((down + up) / 2).to(out_dtype).float()
        assert mid in (down, up)
        p_up = (y[i] == up).double().mean().item()
        expected = ((vals[i] - down) / (up - down)).item()
        assert abs(p_up - expected) < 10 / math.sqrt(n), (i, p_up, expected)


def test_mean_is_unbiased_over_a_large_tensor():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(1 << 18, generator=g) + 1.0  # [1, 2): bf16 ulp 2**-7, e4m3 ulp 2**-3
    for dtype, ulp in ((torch.bfloat16, 2.0**-7), (torch.float8_e4m3fn, 2.0**-3)):
        err = (sr.cast_dtype(x, dtype, stochastic_rounding=True).double() - x.double()).mean().item()
        rne_err = (x.to(dtype).double() - x.double()).abs().mean().item()
        assert abs(err) < 0.01 * ulp < rne_err


def test_bf16_input_hashes_its_widened_bits():
    x = torch.randn(64).bfloat16()
    assert torch.equal(sr.fp32_bits(x), sr.fp32_bits(x.float()))
    a = sr.cast_dtype(x, torch.float8_e4m3fn, True)
    b = sr.cast_dtype(x.float(), torch.float8_e4m3fn, True)
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_quad_index_is_global_and_shape_free():
    x = torch.randn(6, 8)
    a = sr.cast_dtype(x, torch.bfloat16, True)
    b = sr.cast_dtype(x.reshape(-1), torch.bfloat16, True).reshape(6, 8)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    # q continues across a split: the second half equals stochastic_round with quad_offset
    tail = sr.stochastic_round(x.reshape(-1)[24:], torch.bfloat16, quad_offset=6)
    assert torch.equal(tail.view(torch.int16), a.reshape(-1)[24:].view(torch.int16))


def test_rne_pairs_and_special_values():
    x = torch.tensor([1.0, -2.5, 1e-40, 500.0, -1e9, float("inf"), -float("inf"), float("nan"), 0.0, -0.0])
    e4 = sr.cast_dtype(x, torch.float8_e4m3fn).view(torch.uint8).tolist()
    assert e4[3:8] == [0x7E, 0xFE, 0x7E, 0xFE, 0x7F] and e4[8:] == [0x00, 0x80]
    bf = sr.cast_dtype(x, torch.bfloat16).view(torch.int16)
    assert bf[7].item() == 0x7FFF and torch.equal(bf[:7], x[:7].bfloat16().view(torch.int16))
    nan_e4m3 = torch.tensor([0x7F, 0xFF, 0x38], dtype=torch.uint8).view(torch.float8_e4m3fn)
    assert sr.cast_dtype(nan_e4m3, torch.float32).view(torch.int32).tolist()[:2] == [0x7FFFFFFF] * 2
    assert sr.cast_dtype(nan_e4m3, torch.bfloat16).view(torch.int16).tolist() == [0x7FFF, 0x7FFF, 0x3F80]
    payload = torch.tensor([0x7FC1, -0x7F], dtype=torch.int16).view(torch.bfloat16)  # NaN payloads kept
    assert sr.cast_dtype(payload, torch.float32).view(torch.int32).tolist() == [0x7FC10000, (0xFF81 << 16) - (1 << 32)]


def test_cast_dtype_rejects_bad_arguments():
    with pytest.raises(ValueError, match="numel % 4"):
        sr.cast_dtype(torch.zeros(6), torch.bfloat16, True)
    with pytest.raises(ValueError, match="allowed"):
        sr.cast_dtype(torch.zeros(8), torch.float16)
    with pytest.raises(ValueError, match="allowed"):
        sr.cast_dtype(torch.zeros(8).bfloat16(), torch.float32, True)


@pytest.mark.parametrize("gm", [32, 128])
@pytest.mark.parametrize("round_sf,packed", [(False, False), (True, False), (True, True)])
def test_per_channel_reference_layout(gm, round_sf, packed):
    """kernelkiln.torch.cast with block (gm, 1) is per_channel_cast's oracle, "col pack" included."""
    t, h = 5 * gm, 256
    x = torch.randn(t, h) * torch.exp2(torch.randint(-8, 8, (1, h)).float())
    q, sf = ref_quant_cast(x, "e4m3", (gm, 1), round_sf=round_sf, use_packed_ue8m0=packed)
    assert q.shape == (t, h) and q.dtype == torch.float8_e4m3fn
    if packed:
        assert sf.shape == (2, h) and sf.dtype == torch.int32
        b = sf.contiguous().view(torch.uint8).view(2, h, 4)
        exps = b.permute(0, 2, 1).reshape(8, h)[:5]
        assert torch.all(b[1, :, 1:] == 0)  # unused bytes of the last word are zero
        sf32 = (exps.to(torch.int32) << 23).view(torch.float32)
    else:
        assert sf.shape == (5, h) and sf.dtype == torch.float32
        sf32 = sf
    amax = x.abs().reshape(5, gm, h).amax(1).clamp(min=1e-4)
    if round_sf:
        assert torch.all(sf32 >= amax / 448) and torch.all(sf32 < 2 * amax / 448)
    else:
        assert torch.equal(sf32, amax / torch.full_like(amax, 448.0))
    assert torch.all((q.float() * sf32.repeat_interleave(gm, 0) - x).abs() <= x.abs() * 2**-3 + sf32.max() * 2**-9)


def test_per_token_stochastic_cast_restarts_the_quad_index_per_row():
    """per_token_cast(stochastic_cast=True): one row is the flat stochastic rounding of its scaled
    values (quad index from 0), and every row is independent of its neighbours."""
    from kernelkiln.torch import cast, stochastic_round
    torch.manual_seed(0)
    x = torch.randn(5, 512) * 3
    q, sf = cast(x, "e4m3", (1, 128), stochastic=True)
    for r in range(5):
        amax = x[r].reshape(4, 128).abs().amax(1, keepdim=True).clamp(min=1e-4)
        scaled = x[r].reshape(4, 128) * (torch.tensor(448.0) / amax)  # IEEE division (a Python scalar would not be)
        alone = stochastic_round(scaled.reshape(-1), torch.float8_e4m3fn)
        assert torch.equal(q[r].view(torch.uint8), alone.view(torch.uint8))
    rne, _ = cast(x, "e4m3", (1, 128))
    assert not torch.equal(q.view(torch.uint8), rne.view(torch.uint8))
