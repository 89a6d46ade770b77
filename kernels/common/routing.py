"""What the warp-per-token routing kernels share (topk_gate, top2_sum_gate, moe_topk_gate and its backward).

Lane L of a token's warp holds experts [L*EPL, L*EPL + EPL), EPL = ceil(E / 32) being the only
compile-time parameter; selection is K rounds of redux.max over ``order_key`` of the lanes' heads.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401  (re-exported to the routers)

WARPS_PER_CTA = 4
PHYSICAL_HASH = 23333  # EPLB replica choice: (ep_rank + token * 23333) % logical_count[e]
EPS = 1e-20  # added to the weight normalization sum


def order_key(x):
    """int32 key whose signed order is x's float order (for redux.max): the magnitude bits of negatives
    are flipped; __fadd_rn(x, 0) turns -0.0 into +0.0 (and is not folded away like x + 0.0)."""
    import tilelang.language as T  # build time only; importing the kernel modules needs no tilelang

    bits = T.reinterpret("int32", T.call_extern("float32", "__fadd_rn", x, T.float32(0)))
    return T.bitwise_xor(bits, T.bitwise_and(T.shift_right(bits, 31), T.int32(0x7FFFFFFF)))


def lane_sort(T, epl):
    """Macro: a lane's ``epl`` (score, expert) pairs sorted descending by odd-even transposition; swaps on
    strict > keep equal neighbours in index order (stable); max/min move the scores."""
    @T.macro
    def sort(vals, idx, swap_f, swap_i):
        for step in T.unroll(epl):
            for i in T.unroll(epl // 2):
                j = i * 2 + step % 2
                if j + 1 < epl:
                    up = vals[j + 1] > vals[j]
                    swap_i[0] = T.if_then_else(up, idx[j + 1], idx[j])
                    idx[j + 1] = T.if_then_else(up, idx[j], idx[j + 1])
                    idx[j] = swap_i[0]
                    swap_f[0] = T.max(vals[j], vals[j + 1])
                    vals[j + 1] = T.min(vals[j], vals[j + 1])
                    vals[j] = swap_f[0]
    return sort


def lane_row_loader(T, epl):
    """Macro: ``dst[0:epl]`` = the lane's experts [lane*EPL, lane*EPL + EPL) of row ``token`` of ``src``
    ([T, E] fp32, contiguous), ``fill`` beyond E. ``vec4`` (a bool or a runtime flag; E % 4 == 0 and a
    16-byte aligned src) selects float4 loads, addressed through experts_div4 = E / 4 so that TileLang
    can prove their alignment."""
    @T.macro
    def load(dst, src, token, lane, num_experts, experts_div4, vec4, fill):
        base = lane * epl
        if epl % 4 == 0 and vec4:
            for c in T.unroll(epl // 4):
                if base + c * 4 < num_experts:
                    for i in T.vectorized(4):
                        dst[c * 4 + i] = src[(T.Cast("int64", token) * experts_div4 + lane * (epl // 4) + c) * 4 + i]
                else:
                    for i in T.unroll(4):
                        dst[c * 4 + i] = fill
        else:
            for j in T.unroll(epl):
                dst[j] = fill
                if base + j < num_experts:
                    dst[j] = src[T.Cast("int64", token) * num_experts + base + j]
    return load
