"""Scalar numerics shared by the quantization kernels (TIR expression builders).

Each helper returns a TIR expression; the rules are OPERATORS.md §2.1/§2.2 and
are mirrored bit for bit by ``tilekiln.torch.quant``.
"""
import tilelang.language as T

def round_sf_exponent(amax, fmt_max):
    """ceil(log2(amax / fmt_max)) as int32, from the fp32 bits of amax * (1/fmt_max).

    An exact power of two maps to itself; anything above rounds up.
    """
    sf0 = amax * T.float32(1.0 / fmt_max)
    bits = T.reinterpret("int32", sf0)
    return T.shift_right(bits - 1, 23) + 1 - 127


def pow2(exponent):
    """2**exponent as fp32, built by placing the biased exponent (exact)."""
    return T.reinterpret("float32", T.shift_left(exponent + 127, 23))


def e2m1_code(y):
    """4-bit e2m1 nibble of y, round-to-nearest-even, saturating at 6, NaN -> 6.

    The grid {0, .5, 1, 1.5, 2, 3, 4, 6} has spacing .5 below 2, 1 in [2, 4) and 2
    above. Scaling |y| by 2, 1 or 1/2 (exact) makes the spacing 1; adding 2**23
    then rounds to an integer (RNE) that sits in the low mantissa bits. This keeps
    the hot loop on full-rate FADD/integer ops: rintf and float->int conversions
    run at a quarter rate and made the FP4 paths compute-bound.
    Inf and NaN give huge bit patterns that the final min() clamps to code 7.
    """
    a = T.abs(y)
    scale = T.if_then_else(a < 2.0, T.float32(2.0), T.if_then_else(a < 4.0, T.float32(1.0), T.float32(0.5)))
    offset = T.if_then_else(a < 2.0, T.int32(0), T.if_then_else(a < 4.0, T.int32(2), T.int32(4)))
    rounded = T.reinterpret("int32", a * scale + T.float32(8388608.0)) - T.int32(0x4B000000)
    code = T.min(rounded + offset, T.int32(7))
    sign = T.shift_right(T.reinterpret("uint32", y), T.uint32(31))
    return T.bitwise_or(T.shift_left(sign, T.uint32(3)), T.Cast("uint32", code))
