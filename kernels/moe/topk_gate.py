"""topk_gate: the K highest scores per row, ties to the smaller expert (docs/SPEC.md §3.1, §2.3).

One warp per token. Lane L holds the contiguous experts [L*EPL, L*EPL + EPL) and
sorts them once, descending (odd-even transposition: adjacent swaps on strict >,
so equal scores keep index order). Each of the K rounds then is:

* the lanes' heads as order-preserving int32 keys (-0.0 folded into +0.0, so keys
  tie exactly where floats compare equal) -> one ``redux.max``;
* the global expert index of every head equal to it -> one ``redux.min``: the
  smallest index wins ties, because lanes hold ascending index ranges;
* the winning lane shifts its list by one (predicated, no divergence).

Per-element work stays on the FP32 pipe (Hopper issues 32-bit integer ops at half
its rate): compares and selects of scores and of float-encoded local indices.
Measured on the H200 against a rescan-the-winner variant: 11.5 vs 15.9 us for
T = 16384, E = 256, K = 8 (benchmarks/results).

Compile-time: experts per lane (EPL = ceil(E/32), so E up to 512) and whether
rows load as float4. Runtime: token count, expert count, K (1..min(E, 32)).
Non-finite scores do not trap (a device assert would kill the CUDA context):
the row's indices become -1 and the token is recorded in ``err`` (host-mapped
memory) for the Python side to raise on.
"""
from kernels.common.routing import (  # noqa: F401  (PASS_CONFIGS is this op's own too)
    PASS_CONFIGS,
    WARPS_PER_CTA,
    lane_row_loader,
    order_key,
)

# Declared in kernelkiln_contract.moe (TOPK_GATE): experts per lane (ceil(E / 32)) and float4 row loads, their
# constraints, and the launch-argument names below, which the build checks against this PrimFunc.


def build(p, arch):
    import tilelang.language as T

    from kernels.common.numerics import MAGIC

    del arch
    epl, vec = p["experts_per_lane"], bool(p["vector_loads"])
    neg_inf = T.float32(float("-inf"))
    load_row = lane_row_loader(T, epl)
    no_expert = 1 << 20  # larger than any expert index: loses every redux.min
    scores_numel, idx_numel = T.dynamic("scores_numel, idx_numel")


    def small_int(xf):
        # float holding a small non-negative integer -> int32, without the quarter-rate cvt
        return T.reinterpret("int32", xf + T.float32(MAGIC)) - T.int32(0x4B000000)

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
            best = T.alloc_var("float32")
            best_j = T.alloc_var("float32")  # local index of the head, float-encoded (FP-pipe selects)
            my_idx = T.alloc_var("int32")
            bad = T.alloc_var("int32")
            idxf = T.alloc_local((epl,), "float32")  # local indices riding along the sorted scores
            swap = T.alloc_local((1,), "float32")
            nonfinite = T.alloc_local((1,), "float32")

            T.pdl_sync()
            if token < num_tokens:
                load_row(vals, scores, token, lane, num_experts, experts_div4, vec, neg_inf)
                # Every real score must be finite: x * 0 is 0 for finite x and NaN for inf/NaN, so
                # one FMA per score accumulates the check (padding slots hold -inf and are skipped).
                nonfinite[0] = T.float32(0)
                for j in T.unroll(epl):
                    if base + j < num_experts:
                        nonfinite[0] = T.call_extern("float32", "__fmaf_rn", vals[j], T.float32(0), nonfinite[0])
                bad = T.if_then_else(T.isnan(nonfinite[0]), 1, 0)
                out_row = T.Cast("int64", token) * num_topk
                if T.any_sync(bad) != 0:
                    if lane == 0:
                        err[0] = 1
                        err[1] = token
                    if lane < num_topk:
                        topk_idx[out_row + lane] = T.int64(-1)
                else:
                    for j in T.unroll(epl):
                        idxf[j] = T.float32(j)
                    # Odd-even transposition sort, descending; adjacent swaps on strict > keep it stable.
                    for step in T.unroll(epl):
                        for i in T.unroll(epl // 2):
                            j = i * 2 + step % 2
                            if j + 1 < epl and vals[j + 1] > vals[j]:
                                swap[0] = vals[j]
                                vals[j] = vals[j + 1]
                                vals[j + 1] = swap[0]
                                swap[0] = idxf[j]
                                idxf[j] = idxf[j + 1]
                                idxf[j + 1] = swap[0]
                    best = vals[0]
                    best_j = idxf[0]
                    my_idx = 0
                    for k in T.serial(num_topk):
                        mine = base + small_int(best_j)
                        top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF), order_key(best))
                        cand = T.if_then_else(order_key(best) == top, mine, T.int32(no_expert))
                        winner = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF), cand)
                        if lane == k:
                            my_idx = winner
                        if winner == mine:  # predicated shift of the winner's list
                            for j in T.unroll(epl - 1):
                                vals[j] = vals[j + 1]
                                idxf[j] = idxf[j + 1]
                            vals[epl - 1] = neg_inf
                        best = vals[0]
                        best_j = idxf[0]
                    if lane < num_topk:
                        topk_idx[out_row + lane] = T.Cast("int64", my_idx)
            T.pdl_trigger()

    return topk_gate
