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

    The grid {0, .5, 1, 1.5, 2, 3, 4, 6} has spacing .5 below 2, 1 in [2, 4) and
    2 above, so the code is rint of a rescaled magnitude plus a per-binade offset.
    fminf returns the non-NaN operand, which turns NaN into the top code.
    """
    a = T.abs(y)
    t = T.if_then_else(a < 2.0, a * 2.0, T.if_then_else(a < 4.0, a, a * 0.5))
    off = T.if_then_else(a < 2.0, T.float32(0.0), T.if_then_else(a < 4.0, T.float32(2.0), T.float32(4.0)))
    code = T.call_extern("float32", "fminf", T.call_extern("float32", "rintf", t) + off, T.float32(7.0))
    sign = T.shift_right(T.reinterpret("uint32", y), T.uint32(31))
    return T.bitwise_or(T.shift_left(sign, T.uint32(3)), T.Cast("uint32", code))
