"""Scalar numerics shared by the quantization kernels (TIR expression builders).

Each helper returns a TIR expression; the rules are docs/SPEC.md §2.1/§2.2 and
are mirrored bit for bit by ``kernelkiln.torch.quant``.
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
    """2**exponent as fp32 for exponent in [-126, 128], built by placing the biased exponent (exact; 128 gives +inf,
    the scale of a block whose amax is inf)."""
    return T.reinterpret("float32", T.shift_left(exponent + 127, 23))


def pow2_inverse(exponent):
    """2**-exponent, the data multiplier of a power-of-two scale 2**exponent: 0 where the scale is +inf (exponent
    128: a block holding an inf, whose finite values then quantize to signed zeros and the inf to NaN, as x / inf
    does). Placing -128 in the exponent field would wrap into the sign bit and give -inf (finite values stored as
    -+448 with flipped signs). Finite amax gives exponent <= 120, so nothing else changes."""
    return T.if_then_else(exponent > 126, T.float32(0), pow2(-exponent))


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
        if scale == 1.0:  # the same single rounding as the FMA, without a register for the 1.0
            value = T.call_extern("float32", "__fadd_rn", a, T.float32(MAGIC + offset))
        else:
            value = T.call_extern("float32", "__fmaf_rn", a, T.float32(scale), T.float32(MAGIC + offset))
        return T.reinterpret("int32", value)

    smallest = T.call_extern("int32", "__vimin3_s32", candidate_bits(2.0, 0), candidate_bits(1.0, 2),
                             candidate_bits(0.5, 4))
    return T.reinterpret("uint32", T.min(smallest, T.int32(CODE_CAP_BITS)))


def _perm(a, b, selector):
    return T.call_extern("uint32", "__byte_perm", a, b, T.uint32(selector))


def _prmt_signs(a, b, selector):
    """PTX prmt whose selector nibbles have bit 3 set: each result byte is 0xFF or 0x00, the sign of the
    selected byte (kernels/common/cuda_source.PRMT_SOURCE, which the kernel imports)."""
    return T.call_extern("uint32", "tk_prmt", a, b, T.uint32(selector))


def _gather(words, selector):
    """Select one byte per word of 4 words into one word (two-level byte_perm)."""
    lo = _perm(words[0], words[1], selector)
    hi = _perm(words[2], words[3], selector)
    return _perm(lo, hi, 0x5410)


# prmt selector (nibble n picks result byte n of the bytes a.b0-3, b.b0-3; 8 + i replicates byte i's sign):
# [sign of a.b3, sign of b.b3] twice, the signs of two fp32 values as 0xFF/0x00 bytes.
TOP_BYTE_SIGNS = 0xFBFB


def e2m1_pack(ys):
    """Pack 8 (or 4) fp32 values into one uint32 of e2m1 nibbles, element 2j low (for 4 values the low 16 bits;
    the high half is unspecified, callers store a uint16).

    Magnitudes: one multiply-add per pair, c_odd * 16 + c_even, puts both 3-bit codes of
    e2m1_code_bits in the pair's low byte (the FP32 exponent bits wrap out or stay above it),
    and __byte_perm gathers the pairs' low bytes: per 8 values 4 IMAD + 3 PRMT, where gathering
    the codes took 6 PRMT + 2 shift/LOP3 (SASS of per_token_cast e2m1; the FP4 casts are
    issue-bound, and the whole change 9f8eb0c took bf16->e2m1 from 79 % to 91 % of copy, A/B in
    benchmarks/results/2026-12-01-9f8eb0cb66/extra/ab; the pipes were not profiled).
    Signs: prmt's sign-replicate selectors turn each value's top byte into a 0xFF/0x00 byte, even
    elements in one word and odd in another, in output byte order, and two LOP3 mask them into
    bits 3 and 7. The signs are the scaled values' own: a NaN value is the positive
    canonical NaN of the GPU's arithmetic (code 7, like the reference), whatever the input's sign.
    """
    n = len(ys)
    if n not in (4, 8):
        raise ValueError(f"e2m1_pack packs 4 or 8 values, got {n}")
    codes = [e2m1_code_bits(y) for y in ys]
    pairs = [codes[2 * j + 1] * T.uint32(16) + codes[2 * j] for j in range(n // 2)]
    bits = [T.reinterpret("uint32", y) for y in ys]

    def signs(first):  # elements first, first + 2, ...
        if n == 4:
            return _prmt_signs(bits[first], bits[first + 2], TOP_BYTE_SIGNS)
        return _perm(_prmt_signs(bits[first], bits[first + 2], TOP_BYTE_SIGNS),
                     _prmt_signs(bits[first + 4], bits[first + 6], TOP_BYTE_SIGNS), 0x5410)

    magnitudes = _gather(pairs, 0x0040) if n == 8 else _perm(pairs[0], pairs[1], 0x0040)
    return T.bitwise_or(T.bitwise_or(magnitudes, T.bitwise_and(signs(0), T.uint32(0x08080808))),
                        T.bitwise_and(signs(1), T.uint32(0x80808080)))
