"""topk_gate: the K highest scores per row, ties to the smaller expert (OPERATORS.md §3.1, §2.3).

One warp per token. Lane L holds the contiguous experts [L*EPL, L*EPL + EPL),
so "lowest lane among equal maxima" is also "smallest expert index", and a
stable descending top-k needs only a max and a ballot per round:

* scores become order-preserving int32 keys (-0.0 folded into +0.0 so that
  keys tie exactly where floats compare equal), reduced with one
  ``__reduce_max_sync`` instead of five shuffles;
* the winning lane is the lowest set bit of ``ballot(best == max)``;
* only the winner rescans its EPL registers.

Compile-time: experts per lane (EPL = ceil(E/32), so E up to 512) and whether
rows load as float4. Runtime: token count, expert count, K (1..min(E, 32)).
Non-finite scores do not trap (a device assert would kill the CUDA context):
the row's indices become -1 and the token is recorded in ``err`` (host-mapped
memory) for the Python side to raise on.
"""
OP = "topk_gate"
PARAM_NAMES = ("experts_per_lane", "vector_loads")
PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
}
WARPS_PER_CTA = 4
MAX_EXPERTS_PER_LANE = 16


def invalid_reason(p):
    epl = p["experts_per_lane"]
    if not (isinstance(epl, int) and 1 <= epl <= MAX_EXPERTS_PER_LANE):
        return f"experts_per_lane must be in 1..{MAX_EXPERTS_PER_LANE}"
    if p["vector_loads"] and epl % 4:
        return "vector_loads needs experts_per_lane % 4 == 0"
    return None


def build(p, arch):
    import tilelang.language as T

    del arch
    epl, vec = p["experts_per_lane"], bool(p["vector_loads"])
    key_min = -(2**31)
    scores_numel, idx_numel = T.dynamic("scores_numel, idx_numel")

    def order_key(x):
        # Flip the magnitude bits of negatives so that signed int order equals float
        # order; -0.0 maps to the key of +0.0 because the two compare equal.
        bits = T.reinterpret("int32", x)
        key = T.bitwise_xor(bits, T.bitwise_and(T.shift_right(bits, 31), T.int32(0x7FFFFFFF)))
        return T.if_then_else(x == T.float32(0), T.int32(0), key)

    @T.prim_func
    def topk_gate(
        scores: T.Tensor((scores_numel,), "float32"),
        topk_idx: T.Tensor((idx_numel,), "int64"),
        err: T.Tensor((2,), "int32"),
        num_tokens: T.int32,
        num_experts: T.int32,
        experts_div4: T.int32,  # num_experts // 4, used by the float4 variant
        num_topk: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, WARPS_PER_CTA), threads=32 * WARPS_PER_CTA) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            token = bx * WARPS_PER_CTA + tx // 32
            base = lane * epl
            vals = T.alloc_local((epl,), "float32")
            keys = T.alloc_local((epl,), "int32")
            best = T.alloc_var("int32")
            best_j = T.alloc_var("int32")
            my_idx = T.alloc_var("int64")
            bad = T.alloc_var("int32")

            T.pdl_sync()
            if token < num_tokens:
                if vec:
                    for c in T.unroll(epl // 4):
                        if base + c * 4 < num_experts:
                            for i in T.vectorized(4):
                                vals[c * 4 + i] = scores[
                                    (T.Cast("int64", token) * experts_div4 + lane * (epl // 4) + c) * 4 + i]
                        else:
                            for i in T.unroll(4):
                                vals[c * 4 + i] = T.float32(0)
                else:
                    for j in T.unroll(epl):
                        vals[j] = T.float32(0)
                        if base + j < num_experts:
                            vals[j] = scores[T.Cast("int64", token) * num_experts + base + j]
                bad = 0
                for j in T.unroll(epl):
                    keys[j] = key_min
                    if base + j < num_experts:
                        keys[j] = order_key(vals[j])
                        if not T.isfinite(vals[j]):
                            bad = 1
                out_row = T.Cast("int64", token) * num_topk
                if T.any_sync(bad) != 0:
                    if lane == 0:
                        err[0] = 1
                        err[1] = token
                    if lane < num_topk:
                        topk_idx[out_row + lane] = T.int64(-1)
                else:
                    best = key_min
                    best_j = 0
                    for j in T.unroll(epl):
                        if keys[j] > best:
                            best = keys[j]
                            best_j = j
                    my_idx = T.int64(0)
                    for k in T.serial(num_topk):
                        top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF), best)
                        src = T.__ffs(T.Cast("uint32", T.ballot_sync(best == top))) - 1
                        pick = T.shfl_sync(best_j, src)
                        if lane == k:
                            my_idx = T.Cast("int64", src * epl + pick)
                        if lane == src:
                            for j in T.unroll(epl):
                                if j == best_j:
                                    keys[j] = key_min
                            best = key_min
                            best_j = 0
                            for j in T.unroll(epl):
                                if keys[j] > best:
                                    best = keys[j]
                                    best_j = j
                    if lane < num_topk:
                        topk_idx[out_row + lane] = my_idx
            T.pdl_trigger()

    return topk_gate
