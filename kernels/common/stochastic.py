"""Deterministic stochastic rounding (docs/SPEC.md §2.2), as TIR expression builders.

Used by ``quant.cast(..., stochastic_rounding=True)`` and meant for
``per_token_cast(..., stochastic_cast=True)``. Mirrored bit for bit by
``kernelkiln.torch.stochastic``.

Random bits
    Per quad of 4 consecutive fp32 values v0..v3 (after any scaling) at quad
    index q, over their raw uint32 bits, mod 2**32::

        h = v0*0x5671D42B + v1*0x9995E499 + v2*0xACE1B8A5 + v3*0xE153538D + q
        h ^= h >> 23; h *= 0x7FEB352D; h ^= h >> 16
        r0 = h * 0x846CA68B; r0 ^= r0 >> 11
        r1 = h * 0xD35A2D97; r1 ^= r1 >> 11      (bf16 outputs only)

Which bits round which element (the layout PTX documents for ``cvt.rs``, with
the operands ordered so the packed result is in memory order)
    * bf16:  v0 uses ``r0 & 0xFFFF``, v1 ``r0 >> 16``, v2 ``r1 & 0xFFFF``, v3 ``r1 >> 16``
      (``cvt.rs.satfinite.bf16x2.f32 d, v1, v0, r0``: operand a = v1 takes the upper half).
    * e4m3:  v0 and v1 use ``r0 & 0xFFFF``, v2 and v3 use ``r0 >> 16``
      (``cvt.rs.satfinite.e4m3x4.f32 d, {v3, v2, v1, v0}, r0``: "lower 16 bits for e, f").

Rounding with 16 random bits r (the definition KernelKiln implements)
    Let u be the output ulp at |v| (for e4m3 below 2**-6 the subnormal step 2**-9),
    k = floor(|v| / u), f = |v| / u - k in [0, 1). The magnitude rounds away from
    zero, to (k + 1) u, exactly when f + r / 2**16 >= 1, i.e. when adding r aligned
    to the top of the discarded mantissa bits carries out of them. So P(up) =
    floor(f * 2**16) / 2**16 + (0 or 1 ulp of 2**-16): unbiased to 16 bits; exact
    values never move. Then ``satfinite``: magnitudes above the format's max
    (inf included) become the max (bf16 0x7F7F, e4m3 448); NaN becomes the
    canonical positive NaN (bf16 0x7FFF, e4m3 0x7F); the sign of every other
    input, zeros included, is kept.

Why software on both architectures
    PTX ``cvt.rs`` exists on sm_100a/sm_103a only, and the ISA text does not pin
    the behaviour down to the bit: the e4m3x4 form hands one 16-bit value to a
    *pair* of operands without saying how it is aligned against the 20 (or, for
    e4m3 subnormals, up to 43) discarded bits, and the per-format layouts are
    given as figures only. Nothing here can be checked on a B200. So every
    architecture runs this exact emulation, which follows the documented reading
    (16 bits added at the top of the discarded field, one 16-bit value per pair):
    results are deterministic and identical on sm_90a and sm_100a, and equal to
    the PyTorch reference. Cost on the H200: fp32 -> bf16 and fp32 -> e4m3 run at the
    copy bandwidth; bf16 -> e4m3 (only 3 bytes per element) is ALU-pipe bound at ~80%
    of it (ncu: ALU pipe 84%, issue 85%, ~24 instructions per element, of which the
    hash, the rounding and the byte packing are the fixed part).

API (all arguments and results are TIR expressions)
    quad_random_bits(v0, v1, v2, v3, quad_index) -> (r0, r1)   # uint32 words
    fp32_bits(v)                      -> uint32 bits of an fp32 expression
    bf16_bits_stochastic(bits, r16)   -> uint32 in [0, 0xFFFF]: bf16 of fp32 ``bits``
    e4m3_byte_stochastic(bits, r16)   -> uint32 in [0, 0xFF]:  e4m3 of fp32 ``bits``
    to_bf16x2_stochastic(b_lo, b_hi, r)           -> uint32: two bf16, b_lo in the low half
    to_e4m3x4_stochastic(b0, b1, b2, b3, r0)      -> uint32: four e4m3 bytes, b0 lowest
where ``bits`` are the fp32 values' raw uint32 bits (``fp32_bits``), r16 < 2**16.
"""
import tilelang.language as T

HASH_MULTIPLIERS = (0x5671D42B, 0x9995E499, 0xACE1B8A5, 0xE153538D)
FINAL_MULTIPLIER = 0x7FEB352D
R0_MULTIPLIER = 0x846CA68B
R1_MULTIPLIER = 0xD35A2D97

_E4M3_NAN = 0x7F
_E4M3_EXP_SHIFT = (127 - 7) << 3  # fp32 (exponent, top 3 mantissa bits) -> e4m3 code
_BF16_MAX = 0x7F7F
_BF16_NAN = 0x7FFF
_FP32_INF_BITS = 0x7F800000
_ABS_MASK = 0x7FFFFFFF


def _u32(v):
    return T.uint32(v)


def fp32_bits(v):
    """Raw uint32 bits of an fp32 expression."""
    return T.reinterpret("uint32", v)


def quad_random_bits(v0, v1, v2, v3, quad_index):
    """(r0, r1) of the §2.2 hash; ``v*`` are fp32 values or their uint32 bits, quad_index any int."""
    words = [w if w.dtype == "uint32" else fp32_bits(w) for w in (v0, v1, v2, v3)]
    h = T.Cast("uint32", quad_index)
    for w, m in zip(words, HASH_MULTIPLIERS):
        h = h + w * _u32(m)
    h = T.bitwise_xor(h, T.shift_right(h, _u32(23)))
    h = h * _u32(FINAL_MULTIPLIER)
    h = T.bitwise_xor(h, T.shift_right(h, _u32(16)))
    r0 = h * _u32(R0_MULTIPLIER)
    r1 = h * _u32(R1_MULTIPLIER)
    return (T.bitwise_xor(r0, T.shift_right(r0, _u32(11))), T.bitwise_xor(r1, T.shift_right(r1, _u32(11))))


def _abs_as_int(a):
    """|v| bits as int32 (they fit) for comparisons: TVM rewrites uint32 ``a < C`` as ``a / C < 1``."""
    return T.reinterpret("int32", a)


def bf16_bits_stochastic(bits, r16):
    """bf16 bits of fp32 ``bits`` rounded with 16 random bits (satfinite, canonical NaN).

    bf16 keeps the top 16 bits of fp32, so the discarded field is exactly the low
    16 bits for normals and subnormals alike: add r16 there, keep the top half.
    """
    a = T.bitwise_and(bits, _u32(_ABS_MASK))
    mag = T.min(T.shift_right(a + r16, _u32(16)), _u32(_BF16_MAX))
    signed = T.bitwise_or(mag, T.bitwise_and(T.shift_right(bits, _u32(16)), _u32(0x8000)))
    return T.if_then_else(_abs_as_int(a) > T.int32(_FP32_INF_BITS), _u32(_BF16_NAN), signed)


def _e4m3_magnitude_code(v, r16_shifted):
    """e4m3 magnitude code (0..0x7E) of fp32 ``v`` (NaN excluded), r16_shifted = r16 << 4.

    |v| is first clamped to 448 (satfinite; 448's discarded bits are zero, so it cannot
    round up). Normal results: 20 fp32 mantissa bits are discarded; r16 << 4 is added
    to them and the (exponent, 3-bit mantissa) field is rebiased (960 = 120 << 3).
    Subnormal results (|v| < 2**-6, step 2**-9): |v| + 2**-6 rounded toward zero lies
    in [2**-6, 2**-5), where the fp32 ulp is 2**-29 = 2**-20 e4m3 steps, so its low 20
    bits are the discarded field truncated (and the field above them, rebiased by
    968 = 960 + 8, is the subnormal code); truncation cannot change the carry test,
    because 16 * r16 + field is an integer. No int<->float conversions (quarter rate).
    """
    a = T.min(T.abs(v), T.float32(448.0))
    sub = a < T.float32(2.0**-6)
    base = T.if_then_else(sub, T.reinterpret("uint32", T.call_extern("float32", "__fadd_rz", a,
                                                                      T.float32(2.0**-6))),
                          T.reinterpret("uint32", a))
    rebias = T.if_then_else(sub, _u32((_E4M3_EXP_SHIFT + 8) << 20), _u32(_E4M3_EXP_SHIFT << 20))
    return T.shift_right(base + r16_shifted - rebias, _u32(20))


def _is_nan_f32(v):
    # An opaque call: TVM's simplifier folds ``v != v`` to false.
    return T.call_extern("bool", "isnan", v)


def e4m3_byte_stochastic(bits, r16):
    """e4m3 byte of fp32 ``bits`` rounded with 16 random bits (satfinite, canonical NaN)."""
    v = T.reinterpret("float32", bits)
    code = _e4m3_magnitude_code(v, T.shift_left(r16, _u32(4)))
    signed = T.bitwise_or(code, T.bitwise_and(T.shift_right(bits, _u32(24)), _u32(0x80)))
    return T.if_then_else(_is_nan_f32(v), _u32(_E4M3_NAN), signed)


def to_bf16x2_stochastic(b_lo, b_hi, r):
    """Two bf16 in one word: b_lo (the lower address) rounded with r & 0xFFFF, b_hi with r >> 16."""
    lo = bf16_bits_stochastic(b_lo, T.bitwise_and(r, _u32(0xFFFF)))
    hi = bf16_bits_stochastic(b_hi, T.shift_right(r, _u32(16)))
    return T.bitwise_or(lo, T.shift_left(hi, _u32(16)))


def _perm(a, b, selector):
    return T.call_extern("uint32", "__byte_perm", a, b, _u32(selector))


def _gather_bytes(words, selector):
    """One byte (per ``selector``, applied to each pair) of each of 4 words, word i into byte i."""
    return _perm(_perm(words[0], words[1], selector), _perm(words[2], words[3], selector), 0x5410)


def to_e4m3x4_stochastic(b0, b1, b2, b3, r0):
    """Four e4m3 in one word, b0 in the lowest byte; (b0, b1) use r0 & 0xFFFF, (b2, b3) r0 >> 16.

    Magnitude codes and sign bits are byte-gathered with PRMT (3 each per quad) instead of
    per-element shifts and ORs. NaN gives 0x7F: code 0x7F, sign taken from +0.
    """
    bits = (b0, b1, b2, b3)
    lo = T.shift_left(T.bitwise_and(r0, _u32(0xFFFF)), _u32(4))
    hi = T.bitwise_and(T.shift_right(r0, _u32(12)), _u32(0xFFFF0))
    vals = [T.reinterpret("float32", b) for b in bits]
    nan = [_is_nan_f32(v) for v in vals]
    codes = [T.if_then_else(n, _u32(_E4M3_NAN), _e4m3_magnitude_code(v, r))
             for v, n, r in zip(vals, nan, (lo, lo, hi, hi))]
    signs = [T.if_then_else(n, _u32(0), b) for b, n in zip(bits, nan)]
    return T.bitwise_or(_gather_bytes(codes, 0x0040),
                        T.bitwise_and(_gather_bytes(signs, 0x0073), _u32(0x80808080)))
