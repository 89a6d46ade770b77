"""Per-block scale expressions shared by fused quantizers (OPERATORS.md §2.1).

The same rules as kernels/quant/per_token_cast.py, written as pure expression
builders so a fused kernel (swiglu, ...) quantizes bit-identically to
per_token_cast of its fp32 output. ``amax`` is already clamped to the floor.
"""
import tilelang.language as T

from kernels.common.numerics import pow2, round_sf_exponent


def fp32_scale(amax, round_sf, fmt_max):
    """(stored fp32 sf, multiplier sf_inv); ``round_sf`` is a runtime int32 flag.

    Plain scales: sf = amax / fmt_max and sf_inv = fmt_max / amax (two IEEE
    divisions, not 1/sf). Rounded scales: 2**e and 2**-e, e = ceil(log2(amax/fmt_max)).
    """
    e = round_sf_exponent(amax, fmt_max)
    sf = T.if_then_else(round_sf != 0, pow2(e), T.call_extern("float32", "__fdiv_rn", amax, T.float32(fmt_max)))
    inv = T.if_then_else(round_sf != 0, pow2(-e), T.call_extern("float32", "__fdiv_rn", T.float32(fmt_max), amax))
    return sf, inv


def ue8m0_scale(amax, fmt_max):
    """(UE8M0 byte as uint8, multiplier 2**-e) of a power-of-two scale."""
    e = round_sf_exponent(amax, fmt_max)
    return T.Cast("uint8", e + 127), pow2(-e)
