"""Scalar numerics shared by the quantization kernels (TIR expression builders).

Each helper returns a TIR expression; the rules are OPERATORS.md §2.1/§2.2 and
are mirrored bit for bit by ``tilekiln.torch.quant``.
"""
import tilelang.language as T

MAGIC = 8388608.0  # 2**23: from here on the FP32 ulp is 1
CODE_CAP_BITS = 0x4B000007  # the bits of MAGIC + 7, the largest e2m1 magnitude code

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


def e2m1_value(word, i):
    """Element i of 8 packed e2m1 nibbles (low nibble first) as fp32: {0, .5, 1, 1.5, 2, 3, 4, 6}, signed
    (exact: built from the bits)."""
    nib = T.bitwise_and(T.shift_right(word, T.uint32(4 * i)), T.uint32(0xF))
    code = T.bitwise_and(nib, T.uint32(7))
    normal = T.bitwise_or(T.shift_left(T.shift_right(code, T.uint32(1)) + T.uint32(126), T.uint32(23)),
                          T.shift_left(T.bitwise_and(code, T.uint32(1)), T.uint32(22)))
    magnitude = T.if_then_else(code == T.uint32(0), T.uint32(0),
                               T.if_then_else(code == T.uint32(1), T.uint32(0x3F000000), normal))
    return T.reinterpret("float32", T.bitwise_or(magnitude, T.shift_left(T.shift_right(nib, T.uint32(3)),
                                                                           T.uint32(31))))


def e2m1_code_bits(y):
    """Bits of 2**23 + e2m1_code(|y|): the 3-bit magnitude code sits in the low byte.

    The grid {0, .5, 1, 1.5, 2, 3, 4, 6} has spacing .5 below 2, 1 in [2, 4) and 2
    above, so code(a) = RNE(2a) below 2, 2 + RNE(a) in [2, 4) and 4 + RNE(a/2) above.
    One FMA with 2**23 + offset rounds each candidate to an integer in the low mantissa
    bits (RNE; the offsets 0, 2, 4 are even, so ties keep their parity). By monotonicity
    of rounding the right candidate is always the smallest of the three, so the code is
    min(c1, c2, c3, 7) (an exhaustive check over every fp32 magnitude found it identical
    to the select form).

    The minimum is taken on the candidates' bits as int32, with Hopper's three-way
    integer min (DPX ``__vimin3_s32``, one VIMNMX3) and one VIMNMX for the cap: two ALU
    instructions instead of three FMNMX. The candidates are positive floats, +inf or
    the FFMA's canonical NaN 0x7FFFFFFF (|y| has no sign), and positive IEEE floats
    order as their bits do, NaN above everything: so NaN and inf land on the cap 7,
    exactly as fminf (which returns the non-NaN operand) did. FP32 min/max share the
    half-rate ALU pipe with the packing's PRMT/LOP3, and the FP4 casts are issue-bound:
    with the packed bf16 amax this took per_token_cast bf16->e2m1 from 74 % to 76 % of
    copy bandwidth (benchmarks/results/tuning/2026-12-01-per-token-cast-ab.json).
    """
    a = T.abs(y)

    def candidate_bits(scale, offset):
        return T.reinterpret("int32", T.call_extern("float32", "__fmaf_rn", a, T.float32(scale),
                                                    T.float32(MAGIC + offset)))

    smallest = T.call_extern("int32", "__vimin3_s32", candidate_bits(2.0, 0), candidate_bits(1.0, 2),
                             candidate_bits(0.5, 4))
    return T.reinterpret("uint32", T.min(smallest, T.int32(CODE_CAP_BITS)))


def _perm(a, b, selector):
    return T.call_extern("uint32", "__byte_perm", a, b, T.uint32(selector))


def _gather(words, selector):
    """Select one byte per word of 4 words into one word (two-level byte_perm)."""
    lo = _perm(words[0], words[1], selector)
    hi = _perm(words[2], words[3], selector)
    return _perm(lo, hi, 0x5410)


def e2m1_pack(ys):
    """Pack 8 (or 4) fp32 values into one uint32 (uint16) of e2m1 nibbles, element 2j low.

    Codes are byte-gathered from the rounded FP32 bits and sign bits from the
    values' top bytes with ``__byte_perm`` (one PRMT per pair of elements), so the
    per-element integer work is about two ops instead of five.
    """
    n = len(ys)
    codes = [e2m1_code_bits(y) for y in ys]
    signs = [T.reinterpret("uint32", y) for y in ys]
    if n == 4:
        codes += [T.uint32(0), T.uint32(0)] * 2
        signs += [T.uint32(0), T.uint32(0)] * 2
    even_codes = _gather(codes[0::2], 0x0040)  # low byte of each even element
    odd_codes = _gather(codes[1::2], 0x0040)
    # Top byte of each value (its bit 7 is the sign; __byte_perm has no sign-replicate mode).
    even_tops = _gather(signs[0::2], 0x0073)
    odd_tops = _gather(signs[1::2], 0x0073)
    sign_bits = T.bitwise_or(T.bitwise_and(T.shift_right(even_tops, T.uint32(4)), T.uint32(0x08080808)),
                             T.bitwise_and(odd_tops, T.uint32(0x80808080)))
    return T.bitwise_or(T.bitwise_or(even_codes, T.shift_left(odd_codes, T.uint32(4))), sign_bits)
