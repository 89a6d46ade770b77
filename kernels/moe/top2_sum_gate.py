"""top2_sum_gate: the DeepSeek-V3 group-limited router (v1 API; OPERATORS.md §2.3, §3.1).

One warp per token; lane L holds experts [L*EPL, L*EPL + EPL) in registers, both the
un-biased score s (sigmoid or sqrt-softplus of the logit, with the CUDA formulas that
torch's own kernels use) and the ranking score b = s + bias.

* Groups (num_groups > 0 and != num_topk_groups): a group is 2**lpg_shift whole lanes
  (the host checks that layout). Each lane's local top-2 of b is merged over the group's
  lanes with xor shuffles, the group score is top1 + top2, and a group survives when
  fewer than num_topk_groups groups beat it (larger score, or equal and lower id). The
  b of every expert in a dropped group becomes -inf.
* Top-K: as in topk_gate.py: each lane sorts its b once (stable odd-even transposition),
  then K rounds of redux.max over order-preserving int keys and redux.min over the
  expert indices of the equal heads (ties -> smaller index).
* Fixed rows (fix_routing_mask) take their experts from unmapped_topk_idx instead.
* Lane k < K fetches s of its expert from the owner lane (EPL shuffles), the
  denominator is 1e-20 + s_0 + s_1 + ... in that order (K shuffles), and
  w_k = s_k / denominator * routed_scaling_factor.
* Lanes K..K+S-1 are the shared experts (E + j, weight 1). Then the EPLB map
  phys = map[e, (ep_rank + token * 23333) % logical_count[e]], then expert-TP masking.

Masks, maps, unmapped indices, the scoring function and float4 row loads are runtime
flags (uniform branches), so the only compile-time parameter is EPL = ceil(E / 32).
Non-finite logits or bias of an active token do not trap: the row's indices become
-1 and the token is recorded in ``err`` (host-mapped memory), as in topk_gate.
"""
OP = "top2_sum_gate"
PARAM_NAMES = ("experts_per_lane",)
PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
}
WARPS_PER_CTA = 4
MAX_EXPERTS_PER_LANE = 16
PHYSICAL_HASH = 23333
EPS = 1e-20


def invalid_reason(p):
    epl = p["experts_per_lane"]
    if not (isinstance(epl, int) and 1 <= epl <= MAX_EXPERTS_PER_LANE):
        return f"experts_per_lane must be in 1..{MAX_EXPERTS_PER_LANE}"
    return None


def build(p, arch):
    import tilelang.language as T

    from kernels.common.numerics import MAGIC

    del arch
    epl = p["experts_per_lane"]
    neg_inf = T.float32(float("-inf"))
    no_expert = 1 << 20  # larger than any expert index: loses every redux.min
    logits_numel, e_numel, t_numel, map_numel, cnt_numel, un_numel, out_numel = T.dynamic(
        "logits_numel, e_numel, t_numel, map_numel, cnt_numel, un_numel, out_numel")

    def order_key(x):
        # Signed int order == float order; __fadd_rn(x, 0) folds -0.0 into +0.0 so keys tie like floats.
        bits = T.reinterpret("int32", T.call_extern("float32", "__fadd_rn", x, T.float32(0)))
        return T.bitwise_xor(bits, T.bitwise_and(T.shift_right(bits, 31), T.int32(0x7FFFFFFF)))

    def small_int(xf):
        return T.reinterpret("int32", xf + T.float32(MAGIC)) - T.int32(0x4B000000)

    def score(x, scoring):
        # torch's CUDA formulas: sigmoid 1 / (1 + exp(-x)); softplus x > 20 ? x : log1p(exp(x)); IEEE sqrt.
        sig = T.float32(1) / (T.float32(1) + T.call_extern("float32", "expf", -x))
        soft = T.if_then_else(x > T.float32(20), x,
                              T.call_extern("float32", "log1pf", T.call_extern("float32", "expf", x)))
        return T.if_then_else(scoring == 0, sig, T.call_extern("float32", "sqrtf", soft))

    @T.prim_func
    def top2_sum_gate(
        logits: T.Tensor((logits_numel,), "float32"),
        bias: T.Tensor((e_numel,), "float32"),
        mask: T.Tensor((t_numel,), "uint8"),
        fix_mask: T.Tensor((t_numel,), "uint8"),
        to_physical_map: T.Tensor((map_numel,), "int32"),
        logical_count: T.Tensor((cnt_numel,), "int32"),
        unmapped: T.Tensor((un_numel,), "int64"),
        topk_idx: T.Tensor((out_numel,), "int64"),
        topk_weights: T.Tensor((out_numel,), "float32"),
        err: T.Tensor((2,), "int32"),
        num_tokens: T.int32,
        num_experts: T.int32,
        experts_div4: T.int32,  # num_experts // 4, for the float4 loads
        num_topk: T.int32,
        num_groups: T.int32,  # 0: no group limit
        num_topk_groups: T.int32,
        lpg_shift: T.int32,  # log2(lanes per group)
        num_shared: T.int32,  # shared-expert slots appended (0 unless use_shared_as_routed)
        routed_scaling_factor: T.float32,
        ep_rank: T.int32,
        experts_per_rank: T.int32,
        tp_rank: T.int32,
        num_tp_ranks: T.int32,
        map_cols: T.int32,  # to_physical_map.shape[1]
        unmapped_stride: T.int32,
        scoring: T.int32,  # 0 sigmoid, 1 sqrtsoftplus
        flags: T.int32,  # 1 mask, 2 fix_routing_mask, 4 physical map, 8 unmapped_topk_idx, 16 float4 loads
    ):
        with T.Kernel(T.ceildiv(num_tokens, WARPS_PER_CTA), threads=32 * WARPS_PER_CTA) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            token = bx * WARPS_PER_CTA + tx // 32
            base = lane * epl
            x = T.alloc_local((epl,), "float32")
            vals = T.alloc_local((epl,), "float32")  # b, sorted later
            unb = T.alloc_local((epl,), "float32")  # s, in expert order
            idxf = T.alloc_local((epl,), "float32")
            swap = T.alloc_local((1,), "float32")
            acc = T.alloc_local((1,), "float32")
            m1 = T.alloc_var("float32")
            m2 = T.alloc_var("float32")
            o1 = T.alloc_var("float32")
            o2 = T.alloc_var("float32")
            gs = T.alloc_var("float32")
            rank = T.alloc_var("int32")
            best = T.alloc_var("float32")
            best_j = T.alloc_var("float32")
            my_idx = T.alloc_var("int32")
            sc = T.alloc_var("float32")
            den = T.alloc_var("float32")
            w = T.alloc_var("float32")
            e = T.alloc_var("int32")
            bad = T.alloc_var("int32")
            width = num_topk + num_shared
            out_row = T.Cast("int64", token) * width

            T.pdl_sync()
            if token < num_tokens:
                active = T.bitwise_and(flags, 1) == 0 or mask[token] != T.uint8(0)
                if not active:
                    if lane < width:
                        topk_idx[out_row + lane] = T.int64(-1)
                        topk_weights[out_row + lane] = T.float32(0)
                    if T.bitwise_and(flags, 8) != 0 and lane < num_topk:
                        unmapped[T.Cast("int64", token) * unmapped_stride + lane] = T.int64(-1)
                else:
                    if epl % 4 == 0:
                        if T.bitwise_and(flags, 16) != 0:
                            for c in T.unroll(epl // 4):
                                if base + c * 4 < num_experts:
                                    for i in T.vectorized(4):
                                        x[c * 4 + i] = logits[(T.Cast("int64", token) * experts_div4 +
                                                               lane * (epl // 4) + c) * 4 + i]
                                else:
                                    for i in T.unroll(4):
                                        x[c * 4 + i] = T.float32(0)
                        else:
                            for j in T.unroll(epl):
                                x[j] = T.float32(0)
                                if base + j < num_experts:
                                    x[j] = logits[T.Cast("int64", token) * num_experts + base + j]
                    else:
                        for j in T.unroll(epl):
                            x[j] = T.float32(0)
                            if base + j < num_experts:
                                x[j] = logits[T.Cast("int64", token) * num_experts + base + j]
                    # x * 0 is 0 for finite x and NaN otherwise: one FMA per value checks logits and bias.
                    acc[0] = T.float32(0)
                    for j in T.unroll(epl):
                        unb[j] = T.float32(0)
                        vals[j] = neg_inf
                        if base + j < num_experts:
                            unb[j] = score(x[j], scoring)
                            vals[j] = unb[j] + bias[base + j]
                            acc[0] = T.call_extern("float32", "__fmaf_rn", x[j], T.float32(0), acc[0])
                            acc[0] = T.call_extern("float32", "__fmaf_rn", vals[j], T.float32(0), acc[0])
                    bad = T.if_then_else(T.isnan(acc[0]), 1, 0)
                    if T.any_sync(bad) != 0:
                        if lane == 0:
                            err[0] = 1
                            err[1] = token
                        if lane < width:
                            topk_idx[out_row + lane] = T.int64(-1)
                            topk_weights[out_row + lane] = T.float32(0)
                    else:
                        fixed = T.bitwise_and(flags, 10) == 10 and fix_mask[token] != T.uint8(0)
                        my_idx = -1
                        if fixed:
                            if lane < num_topk:
                                given = unmapped[T.Cast("int64", token) * unmapped_stride + lane]
                                if given >= T.int64(0) and given < T.Cast("int64", num_experts):
                                    my_idx = T.Cast("int32", given)
                        else:
                            if num_groups > 0 and num_groups != num_topk_groups:
                                # local top-2 of b (a multiset: an equal second value counts)
                                m1 = neg_inf
                                m2 = neg_inf
                                for j in T.unroll(epl):
                                    m2 = T.max(m2, T.min(m1, vals[j]))
                                    m1 = T.max(m1, vals[j])
                                for s in T.unroll(5):
                                    offset = 16 >> s
                                    if offset < T.shift_left(1, lpg_shift):
                                        o1 = T.shfl_xor(m1, offset)
                                        o2 = T.shfl_xor(m2, offset)
                                        m2 = T.max(T.min(m1, o1), T.max(m2, o2))
                                        m1 = T.max(m1, o1)
                                gs = m1 + m2
                                my_group = T.shift_right(lane, lpg_shift)
                                rank = 0
                                for g in T.serial(num_groups):
                                    other = T.shfl_sync(gs, T.shift_left(g, lpg_shift))
                                    if other > gs or (other == gs and g < my_group):
                                        rank = rank + 1
                                if rank >= num_topk_groups or my_group >= num_groups:
                                    for j in T.unroll(epl):
                                        vals[j] = neg_inf
                            for j in T.unroll(epl):
                                idxf[j] = T.float32(j)
                            # Odd-even transposition sort, descending; swaps on strict > keep it stable.
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
                            for k in T.serial(num_topk):
                                mine = base + small_int(best_j)
                                top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF),
                                                    order_key(best))
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
                        # s of my expert from its owner lane (every lane shuffles: no divergence)
                        owner = T.max(my_idx, 0) // epl
                        slot = T.max(my_idx, 0) - owner * epl
                        sc = T.float32(0)
                        for j in T.unroll(epl):
                            v = T.shfl_sync(unb[j], owner)
                            if slot == j and my_idx >= 0:
                                sc = v
                        den = T.float32(EPS)
                        for k in T.serial(num_topk):
                            den = den + T.shfl_sync(sc, k)
                        w = sc / den * routed_scaling_factor
                        if T.bitwise_and(flags, 8) != 0 and lane < num_topk:
                            unmapped[T.Cast("int64", token) * unmapped_stride + lane] = T.Cast("int64", my_idx)
                        e = my_idx
                        if lane >= num_topk:
                            e = num_experts + lane - num_topk
                            w = T.float32(1)
                        if lane < width:
                            if T.bitwise_and(flags, 4) != 0 and e >= 0:
                                dup = (T.Cast("int64", ep_rank) + T.Cast("int64", token) * PHYSICAL_HASH) % \
                                    T.Cast("int64", logical_count[e])
                                e = to_physical_map[T.Cast("int64", e) * map_cols + dup]
                            if e >= 0:  # expert-TP masking and local renumbering
                                if (e // experts_per_rank) % num_tp_ranks != tp_rank:
                                    e = -1
                                else:
                                    e = e - tp_rank * experts_per_rank
                                    e = e - e // (experts_per_rank * num_tp_ranks) * \
                                        (experts_per_rank * num_tp_ranks - experts_per_rank)
                            topk_idx[out_row + lane] = T.Cast("int64", e)
                            topk_weights[out_row + lane] = w
            T.pdl_trigger()

    return top2_sum_gate
