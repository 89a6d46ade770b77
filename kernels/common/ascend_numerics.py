"""The quantization numerics of the Ascend kernels, written once over an abstract vector ``ops``.

The Ascend kernels (kernels/quant/per_token_cast_ascend.py) call these functions with ``SimdOps``, which emits
TileLang Ascend SIMD instructions on 64-lane 32-bit vector registers. The CPU tests call the same functions with
``NumpyOps`` (numpy int32/float32 arrays) and compare the result with the references (kernelkiln.torch): so the
formulas the kernels compute are checked bit for bit on the CPU, exhaustively where the input space allows it
(tests/build/test_ascend_numerics.py). What the model cannot check is the hardware's own arithmetic, which these
formulas keep to: fp32 multiply and add rounded to nearest even, integer and bitwise operations, integer
compare/select, and (only for plain fp32 scales) the correctly rounded fp32 division ``vdiv(precision='exact')``.
No float-to-fp8/fp4 conversion instruction is used: its saturation and NaN rules are not documented for dav-3510,
and the references' rules (docs/SPEC.md §2.1) are written out in integer arithmetic instead.

Conventions: ``bits`` are int32 vectors holding fp32 bit patterns; shifts are applied to non-negative values only
or masked afterwards, so arithmetic and logical right shifts agree.
"""
MAGIC = 8388608.0  # 2**23: adding it rounds a value in [0, 2**23) to an integer in the low mantissa bits (RNE)
MAGIC_BITS = 0x4B000000
FP32_INF_BITS = 0x7F800000
FP32_ABS_MASK = 0x7FFFFFFF
E4M3_MAX_BITS = 0x43E00000  # 448.0
E4M3_MIN_NORMAL_BITS = 0x3C800000  # 2**-6
E4M3_NAN = 0x7F
E4M3_MAX_CODE = 0x7E
# e4m3 normal codes are the fp32 exponent and top 3 mantissa bits, minus the exponent bias difference (127 - 7) << 3
E4M3_REBIAS = (127 - 7) << 3
E2M1_CAP_BITS = MAGIC_BITS + 7  # code 7 (6.0) is the largest magnitude; NaN and inf land there too


def abs_bits_nan_zero(o, bits):
    """|x| as fp32 bits, NaN counted as 0 (the references' amax ignores NaN): non-negative int32, whose integer
    order is the float order, so block maxima are integer maxima."""
    a = o.band(bits, FP32_ABS_MASK)
    return o.select(o.i(0), a, o.gt(a, FP32_INF_BITS))


def ceil_log2_exponent(o, amax, fmt_max):
    """e = ceil(log2(amax * fp32(1 / fmt_max))) from the bits (round_sf and UE8M0 scales): bits - 1 drops an exact
    power of two into the binade below, so it maps to itself. ``amax`` is fp32 and positive (floored)."""
    bits = o.bits(o.fmuls(amax, 1.0 / fmt_max))
    return o.adds(o.shr(o.adds(bits, -1), 23), 1 - 127)


def pow2_bits(o, e):
    """fp32 bits of 2**e for e in [-126, 128] (128: +inf, the scale of a block holding an inf)."""
    return o.shl(o.adds(e, 127), 23)


def pow2_inverse_bits(o, e):
    """fp32 bits of the data multiplier 2**-e, 0 where the scale is +inf (e > 126)."""
    return o.select(o.i(0), o.shl(o.sub(o.i(127), e), 23), o.gt(e, 126))


def e4m3_codes(o, y):
    """fp32 ``y`` -> e4m3fn bytes (in int32 lanes): round to nearest even, saturating to +-448, NaN -> 0x7F (no sign),
    the rules of the references' _to_e4m3 (clamp, then round)."""
    bits = o.bits(y)
    a = o.band(bits, FP32_ABS_MASK)
    sign = o.band(o.shr(bits, 24), 0x80)
    # subnormal range (|y| < 2**-6): the code is RNE(|y| * 2**9); 8 is the smallest normal, which continues the codes
    sub = o.adds(o.bits(o.fadds(o.fmuls(o.float(a), 512.0), MAGIC)), -MAGIC_BITS)
    # normal range: keep 3 mantissa bits, rounding to nearest even on the 20 dropped ones (the carry moves the exponent)
    rounded = o.shr(o.add(o.adds(a, 0x7FFFF), o.band(o.shr(a, 20), 1)), 20)
    normal = o.adds(rounded, -E4M3_REBIAS)
    code = o.select(sub, normal, o.lt(a, E4M3_MIN_NORMAL_BITS))
    code = o.select(o.i(E4M3_MAX_CODE), code, o.ge(a, E4M3_MAX_BITS))
    return o.select(o.i(E4M3_NAN), o.bor(code, sign), o.gt(a, FP32_INF_BITS))


def e2m1_nibbles(o, y):
    """fp32 ``y`` -> e2m1 nibbles sign << 3 | code (in int32 lanes), the references' _e2m1_nibbles: RNE onto
    {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6, NaN -> 7 without sign, -0.0 keeps its sign.

    The grid's spacing is .5 below 2, 1 in [2, 4) and 2 above, so the code is RNE(2a) below 2, 2 + RNE(a) in [2, 4)
    and 4 + RNE(a / 2) above; each candidate is one rounding of a + 2**23 + offset, and the right one is always the
    smallest (rounding is monotonic), capped at 7. Candidates are positive floats (or +inf / NaN, which land on the
    cap), compared as their int32 bits. a * 2 and a * .5 are exact except in the subnormal range, where the
    rounding cannot change the sum with 2**23."""
    bits = o.bits(y)
    a_bits = o.band(bits, FP32_ABS_MASK)
    a = o.float(a_bits)
    c1 = o.bits(o.fadds(o.fmuls(a, 2.0), MAGIC))
    c2 = o.bits(o.fadds(a, MAGIC + 2.0))
    c3 = o.bits(o.fadds(o.fmuls(a, 0.5), MAGIC + 4.0))
    code = o.adds(o.mins(o.min(o.min(c1, c2), c3), E2M1_CAP_BITS), -MAGIC_BITS)
    negative = o.select(o.i(0), o.band(o.shr(bits, 31), 1), o.gt(a_bits, FP32_INF_BITS))
    return o.bor(code, o.shl(negative, 3))


def scales(o, amax_bits, clamp_bits, fmt_max, kind):
    """(stored scale word, data multiplier bits) of a block from its amax bits (abs_bits_nan_zero, maxed over the
    block), floored at the clamp (positive floats order as their bits).

    ``kind``: "pow2" (fp32 2**e, round_sf), "ue8m0" (the biased exponent e + 127 as an int32 0..255), "div"
    (fp32 amax / fmt_max, and fmt_max / amax for the multiplier: two correctly rounded divisions)."""
    clamped = o.max(amax_bits, clamp_bits)
    if kind == "div":
        amax = o.float(clamped)
        return o.bits(o.fdiv(amax, o.f(fmt_max))), o.bits(o.fdiv(o.f(fmt_max), amax))
    e = ceil_log2_exponent(o, o.float(clamped), fmt_max)
    stored = o.adds(e, 127) if kind == "ue8m0" else pow2_bits(o, e)
    return stored, pow2_inverse_bits(o, e)


class SimdOps:
    """``ops`` over TileLang Ascend SIMD registers (int32x64 / float32x64; all lanes active)."""

    def __init__(self, T, S):
        self.T, self.S = T, S

    def i(self, c):
        return self.S.vdup(c, "int32")

    def f(self, c):
        return self.S.vdup(c, "float32")

    def bits(self, x):
        return self.T.reinterpret(x, "int32x64")

    def float(self, x):
        return self.T.reinterpret(x, "float32x64")

    def band(self, a, c):
        return self.S.vand(a, self.i(c))

    def bor(self, a, b):
        return self.S.vor(a, b)

    def shr(self, a, n):
        return self.S.vshrs(a, n)

    def shl(self, a, n):
        return self.S.vshls(a, n)

    def add(self, a, b):
        return self.S.vadd(a, b)

    def sub(self, a, b):
        return self.S.vsub(a, b)

    def adds(self, a, c):
        return self.S.vadds(a, c)

    def min(self, a, b):
        return self.S.vmin(a, b)

    def max(self, a, b):
        return self.S.vmax(a, b)

    def mins(self, a, c):
        return self.S.vmins(a, c)

    def fmuls(self, x, c):
        return self.S.vmuls(x, self.T.float32(c))

    def fadds(self, x, c):
        return self.S.vadds(x, self.T.float32(c))

    def fmul(self, x, y):
        return self.S.vmul(x, y)

    def fdiv(self, x, y):
        return self.S.vdiv(x, y, precision="exact")

    def select(self, a, b, pred):
        return self.S.vsel(a, b, pred)

    def gt(self, a, c):
        return self.S.vcmps(a, c, op="gt")

    def ge(self, a, c):
        return self.S.vcmps(a, c, op="ge")

    def lt(self, a, c):
        return self.S.vcmps(a, c, op="lt")


class NumpyOps:
    """The same ``ops`` over numpy arrays (int32 wrap-around, float32 IEEE arithmetic): the CPU model."""

    def __init__(self):
        import numpy as np
        self.np = np

    def i(self, c):
        return self.np.int32(c)

    def f(self, c):
        return self.np.float32(c)

    def bits(self, x):
        return self.np.asarray(x, dtype=self.np.float32).view(self.np.int32)

    def float(self, x):
        return self.np.asarray(x, dtype=self.np.int32).view(self.np.float32)

    def band(self, a, c):
        return self.np.bitwise_and(a, self.np.int32(c))

    def bor(self, a, b):
        return self.np.bitwise_or(a, b)

    def shr(self, a, n):
        return self.np.right_shift(a, self.np.int32(n))

    def shl(self, a, n):
        return self.np.left_shift(a, self.np.int32(n))

    def add(self, a, b):
        with self.np.errstate(over="ignore"):
            return (self.np.asarray(a, dtype=self.np.int64) + b).astype(self.np.int32)

    def sub(self, a, b):
        return (self.np.asarray(a, dtype=self.np.int64) - b).astype(self.np.int32)

    def adds(self, a, c):
        return (self.np.asarray(a, dtype=self.np.int64) + int(c)).astype(self.np.int32)

    def min(self, a, b):
        return self.np.minimum(a, b)

    def max(self, a, b):
        return self.np.maximum(a, b)

    def mins(self, a, c):
        return self.np.minimum(a, self.np.int32(c))

    def fmuls(self, x, c):
        with self.np.errstate(all="ignore"):
            return self.np.asarray(x, dtype=self.np.float32) * self.np.float32(c)

    def fadds(self, x, c):
        with self.np.errstate(all="ignore"):
            return self.np.asarray(x, dtype=self.np.float32) + self.np.float32(c)

    def fmul(self, x, y):
        with self.np.errstate(all="ignore"):
            return self.np.asarray(x, dtype=self.np.float32) * self.np.asarray(y, dtype=self.np.float32)

    def fdiv(self, x, y):
        with self.np.errstate(all="ignore"):
            return self.np.asarray(x, dtype=self.np.float32) / self.np.asarray(y, dtype=self.np.float32)

    def select(self, a, b, pred):
        return self.np.where(pred, a, b).astype(self.np.result_type(a, b))

    def gt(self, a, c):
        return a > c

    def ge(self, a, c):
        return a >= c

    def lt(self, a, c):
        return a < c
