"""Per-block scale expressions shared by fused quantizers (docs/SPEC.md §2.1).

The same rules as kernels/quant/per_token_cast.py, written as pure expression
builders so a fused kernel (swiglu, ...) quantizes bit-identically to
per_token_cast of its fp32 output. ``amax`` is already clamped to the floor.
"""
import tilelang.language as T

from kernels.common.numerics import pow2, pow2_inverse, round_sf_exponent


def fp32_scale(amax, round_sf, fmt_max):
    """(stored fp32 sf, multiplier sf_inv); ``round_sf`` is a runtime int32 flag.

    Plain scales: sf = amax / fmt_max and sf_inv = fmt_max / amax (two IEEE
    divisions, not 1/sf). Rounded scales: 2**e and 2**-e, e = ceil(log2(amax/fmt_max)).
    """
    e = round_sf_exponent(amax, fmt_max)
    sf = T.if_then_else(round_sf != 0, pow2(e), T.call_extern("float32", "__fdiv_rn", amax, T.float32(fmt_max)))
    inv = T.if_then_else(round_sf != 0, pow2_inverse(e), T.call_extern("float32", "__fdiv_rn", T.float32(fmt_max), amax))
    return sf, inv


def ue8m0_scale(amax, fmt_max):
    """(UE8M0 byte as uint8, multiplier 2**-e) of a power-of-two scale."""
    e = round_sf_exponent(amax, fmt_max)
    return T.Cast("uint8", e + 127), pow2_inverse(e)


@T.macro
def fold_column_amax(part, amax, warp, lane, vec, warps, clamp_min):
    """Per-column amax over a CTA's warps (per-channel quantizers): each warp stores its partial amax of
    its ``vec`` columns per lane into the shared ``part`` [warps, 32 * vec], one barrier, then every thread
    folds all warps' partials of its columns into ``amax``, floored at ``clamp_min``."""
    for i in T.vectorized(vec):
        part[warp, lane * vec + i] = amax[i]
    T.sync_threads()
    for i in T.unroll(vec):
        amax[i] = T.max(part[0, lane * vec + i], clamp_min)
    for w in T.unroll(1, warps):
        for i in T.unroll(vec):
            amax[i] = T.max(amax[i], part[w, lane * vec + i])

