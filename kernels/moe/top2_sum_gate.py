"""top2_sum_gate: the DeepSeek-V3 group-limited router (v1 API; docs/SPEC.md §2.3, §3.1).

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

Cost: the kernel is instruction-issue bound (one warp per token; about 820 SASS
instructions per token, counted in the compiled code), so the code minimises
instructions per token:
* scores straight-line for full lanes: the exps, then the reciprocals as nvcc's own
  fast path of the IEEE division (rcp.approx + one Newton FMA, correctly rounded for
  1 + exp(-x) in [1, 2**125]) without its per-value slow-path test (the division
  itself is used when any of the lane's values is outside that range); bias loaded
  up front;
* max/min compare-exchanges; the group rank shared by the group's lanes;
* selection rounds that only shift the list slots that can still become heads,
  straight-line when K >= EPL (no register copies at per-round joins);
* compaction (EPL = 8, K = 8, kept groups fit in 16 half-lanes: DeepSeek-V3): the
  kept groups' experts move to lists of 4 per lane in index order (one ballot per kept
  group, 8 shuffles), so the sort and the shifts work on half the slots; the ties
  rule is unchanged because redux.min picks the smallest global index among equal
  heads and each lane's list stays in index order;
* no TP renumbering with one TP rank; a 32-bit EPLB hash remainder when it fits.
H200, benchmarks/bench_ops_moe.py, T = 16384, E = 256, 8 groups, top-4, K = 8, sigmoid:
26.0 us before these changes, 19.4 us after (both kernels in one run); 19.2 us in the
committed run benchmarks/results/2026-11-30-6978d426e0 (commit 6978d42).

Masks, maps, unmapped indices, the scoring function and float4 row loads are runtime
flags (uniform branches), so the only compile-time parameter is EPL = ceil(E / 32).
Non-finite logits or bias of an active token do not trap: the row's indices become
-1 and the token is recorded in ``err`` (host-mapped memory), as in topk_gate.
"""
from kernels.common.routing import (  # noqa: F401  (PASS_CONFIGS is this op's own too)
    EPS,
    PASS_CONFIGS,
    PHYSICAL_HASH,
    WARPS_PER_CTA,
    lane_row_loader,
    lane_sort,
    order_key,
)

# Declared in kernelkiln_contract.moe (TOP2_SUM_GATE): experts per lane (ceil(E / 32)), and the launch-argument
# names below, which the build checks against this PrimFunc.
COMPACT_EPL = 8  # the experts-per-lane value that gets the kept-group compaction


def build(p, arch):
    import tilelang.language as T

    del arch
    epl = p["experts_per_lane"]
    sort_lane = lane_sort(T, epl)
    load_row = lane_row_loader(T, epl)
    sort_half = lane_sort(T, max(epl // 2, 1))  # the compacted half-lists
    neg_inf = T.float32(float("-inf"))
    no_expert = 1 << 20  # larger than any expert index: loses every redux.min
    logits_numel, e_numel, t_numel, map_numel, cnt_numel, un_numel, out_numel = T.dynamic(
        "logits_numel, e_numel, t_numel, map_numel, cnt_numel, un_numel, out_numel")


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
        flags: T.int32,  # 1 mask, 2 fix_routing_mask, 4 physical map, 8 unmapped_topk_idx, 16 float4 loads,
        #                32 float4 bias loads, 64 compaction of the kept groups allowed
    ):
        with T.Kernel(T.ceildiv(num_tokens, WARPS_PER_CTA), threads=32 * WARPS_PER_CTA) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            token = bx * WARPS_PER_CTA + tx // 32
            base = lane * epl
            full = base + epl <= num_experts
            x = T.alloc_local((epl,), "float32")
            vals = T.alloc_local((epl,), "float32")  # b, sorted later
            unb = T.alloc_local((epl,), "float32")  # s, in expert order
            bb = T.alloc_local((epl,), "float32")  # bias
            swap_f = T.alloc_local((1,), "float32")
            swap_i = T.alloc_local((1,), "int32")
            tmp = T.alloc_local((epl,), "float32")
            idx = T.alloc_local((epl,), "int32")  # global expert indices riding along the sorted scores
            acc = T.alloc_local((1,), "float32")
            ymax = T.alloc_local((1,), "float32")
            won = T.alloc_local((1,), "int32")
            gsel = T.alloc_local((1,), "int32")
            cv = T.alloc_local((max(epl // 2, 1),), "float32")  # compacted half-lists (scores, indices)
            ci = T.alloc_local((max(epl // 2, 1),), "int32")
            compacted = T.alloc_var("int32")
            m1 = T.alloc_var("float32")
            m2 = T.alloc_var("float32")
            o1 = T.alloc_var("float32")
            o2 = T.alloc_var("float32")
            gs = T.alloc_var("float32")
            rank = T.alloc_var("int32")
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
                    load_row(x, logits, token, lane, num_experts, experts_div4, T.bitwise_and(flags, 16) != 0,
                             T.float32(0))
                    # Bias up front (all loads in flight together), then the scores branch-free over the
                    # lane's slots: padding slots (x = 0, bias 0) give finite scores, are harmless to the
                    # finiteness check and are masked afterwards, so full lanes run straight-line code.
                    if epl % 4 == 0 and T.bitwise_and(flags, 32) != 0 and full:
                        for c in T.unroll(epl // 4):
                            for i in T.vectorized(4):
                                bb[c * 4 + i] = bias[base + c * 4 + i]
                    else:
                        for j in T.unroll(epl):
                            bb[j] = T.float32(0)
                            if base + j < num_experts:
                                bb[j] = bias[base + j]
                    if scoring == 0:
                        # torch: 1 / (1 + exp(-x)); the exps first (no branches), then the IEEE divisions
                        for j in T.unroll(epl):
                            tmp[j] = T.float32(1) + T.call_extern("float32", "expf", -x[j])
                        # 1 / y for y in [1, 2**125] (every finite x > -86): nvcc's own fast path of the
                        # IEEE division (approximate reciprocal + one Newton step, correctly rounded in
                        # that range) without its per-value slow-path test; otherwise the division.
                        ymax[0] = tmp[0]
                        for j in T.unroll(1, epl):
                            ymax[0] = T.max(ymax[0], tmp[j])
                        if ymax[0] <= T.float32(2.0 ** 125):
                            for j in T.unroll(epl):
                                r0 = T.call_extern("float32", "tl::fast_rcp", tmp[j])
                                unb[j] = T.call_extern("float32", "__fmaf_rn", r0, -T.call_extern(
                                    "float32", "__fmaf_rn", tmp[j], r0, T.float32(-1)), r0)
                        else:
                            for j in T.unroll(epl):
                                unb[j] = T.float32(1) / tmp[j]
                    else:
                        # torch: softplus = x > 20 ? x : log1p(exp(x)) (both sides computed, then selected), sqrt
                        for j in T.unroll(epl):
                            tmp[j] = T.call_extern("float32", "log1pf", T.call_extern("float32", "expf", x[j]))
                        for j in T.unroll(epl):
                            unb[j] = T.call_extern("float32", "sqrtf", T.if_then_else(x[j] > T.float32(20), x[j],
                                                                                      tmp[j]))
                    # x * 0 is 0 for finite x and NaN otherwise: one FMA per value checks logits and bias.
                    acc[0] = T.float32(0)
                    for j in T.unroll(epl):
                        vals[j] = unb[j] + bb[j]
                        acc[0] = T.call_extern("float32", "__fmaf_rn", x[j], T.float32(0), acc[0])
                        acc[0] = T.call_extern("float32", "__fmaf_rn", vals[j], T.float32(0), acc[0])
                    if not full:
                        for j in T.unroll(epl):
                            if base + j >= num_experts:
                                unb[j] = T.float32(0)
                                vals[j] = neg_inf
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
                        compacted = 0
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
                                # rank = groups that beat mine (larger score, or equal and lower id); the
                                # group's lanes share the comparisons (lane `sub` takes groups = sub mod
                                # lanes-per-group) and add their counts with xor shuffles.
                                my_group = T.shift_right(lane, lpg_shift)
                                sub = T.bitwise_and(lane, T.shift_left(1, lpg_shift) - 1)
                                rank = 0
                                for gi in T.serial(T.shift_right(num_groups + T.shift_left(1, lpg_shift) - 1,
                                                                 lpg_shift)):
                                    g = T.shift_left(gi, lpg_shift) + sub
                                    other = T.shfl_sync(gs, T.bitwise_and(T.shift_left(g, lpg_shift), 31))
                                    if g < num_groups and (other > gs or (other == gs and g < my_group)):
                                        rank = rank + 1
                                for s in T.unroll(5):
                                    offset = 16 >> s
                                    if offset < T.shift_left(1, lpg_shift):
                                        rank = rank + T.shfl_xor(rank, offset)
                                if rank >= num_topk_groups or my_group >= num_groups:
                                    for j in T.unroll(epl):
                                        vals[j] = neg_inf
                                # (epl == 8 only: E = 256 with K = 8, the DeepSeek-V3 router the GPU tests cover)
                                if epl == COMPACT_EPL and T.bitwise_and(flags, 64) != 0 and num_topk == epl and \
                                        T.shift_left(num_topk_groups, lpg_shift + 1) <= 32:
                                    # Compaction: the kept groups' experts move to half-lists of epl / 2 per
                                    # lane (kept group q -> lanes [q, q + 1) * 2 * lanes-per-group, in index
                                    # order), so the sort and the rounds work on half as many slots.
                                    compacted = 1
                                    qd = T.shift_right(lane, lpg_shift + 1)
                                    part = T.bitwise_and(lane, T.shift_left(2, lpg_shift) - 1)
                                    gsel[0] = 0
                                    for q in T.serial(num_topk_groups):
                                        kept = T.call_extern("uint32", "__ballot_sync", T.uint32(0xFFFFFFFF),
                                                             sub == 0 and my_group < num_groups and rank == q)
                                        if qd == q:
                                            gsel[0] = T.shift_right(T.call_extern("int32", "__ffs", kept) - 1,
                                                                    lpg_shift)
                                    src = T.shift_left(gsel[0], lpg_shift) + T.shift_right(part, 1)
                                    for c in T.unroll(epl):
                                        tmp[c] = T.shfl_sync(vals[c], src)
                                    for i in T.unroll(epl // 2):
                                        cv[i] = T.if_then_else(qd < num_topk_groups, T.if_then_else(
                                            T.bitwise_and(part, 1) != 0, tmp[epl // 2 + i], tmp[i]), neg_inf)
                                        ci[i] = src * epl + T.bitwise_and(part, 1) * (epl // 2) + i
                                    # the same stable sort and rounds as below, on epl / 2 slots
                                    sort_half(cv, ci, swap_f, swap_i)
                                    for k in T.unroll(epl):
                                        r = epl - 1 - k  # rounds after this one
                                        top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF),
                                                            order_key(cv[0]))
                                        head = ci[0]
                                        cand = T.if_then_else(order_key(cv[0]) == top, head, T.int32(no_expert))
                                        winner = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF),
                                                               cand)
                                        if lane == k:
                                            my_idx = winner
                                        won[0] = T.if_then_else(winner == head, 1, 0)
                                        for j in T.unroll(max(epl // 2 - 1, 1)):
                                            if j < r and j + 1 < epl // 2:
                                                cv[j] = T.if_then_else(won[0] != 0, cv[j + 1], cv[j])
                                                ci[j] = T.if_then_else(won[0] != 0, ci[j + 1], ci[j])
                                        if r >= epl // 2:
                                            cv[epl // 2 - 1] = T.if_then_else(won[0] != 0, neg_inf, cv[epl // 2 - 1])
                        if not fixed and compacted == 0:
                            for j in T.unroll(epl):
                                idx[j] = base + j
                            sort_lane(vals, idx, swap_f, swap_i)  # stable, descending (routing.lane_sort)
                            # Selection rounds (as topk_gate): the lanes' heads as order-preserving keys ->
                            # redux.max, the smallest expert index among equal heads -> redux.min, the
                            # winning lane drops its head. Rounds followed by >= epl rounds shift the whole
                            # list; a round followed by r < epl rounds shifts only slots 0..r-1, the only
                            # ones that can still become heads (K = epl = 8: 28 instead of 56 moves).
                            for k in T.serial(T.max(num_topk - epl, 0)):
                                top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF),
                                                    order_key(vals[0]))
                                head = idx[0]
                                cand = T.if_then_else(order_key(vals[0]) == top, head, T.int32(no_expert))
                                winner = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF), cand)
                                if lane == k:
                                    my_idx = winner
                                if winner == head:  # predicated shift of the winner's list
                                    for j in T.unroll(epl - 1):
                                        vals[j] = vals[j + 1]
                                        idx[j] = idx[j + 1]
                                    vals[epl - 1] = neg_inf
                            if num_topk >= epl:
                                # The last epl rounds, unconditionally (straight-line: no register copies
                                # at per-round joins); a round followed by r rounds shifts only slots
                                # 0..r-1, the only ones that can still become heads.
                                for rr in T.unroll(epl):
                                    r = epl - 1 - rr  # rounds after this one
                                    top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF),
                                                        order_key(vals[0]))
                                    head = idx[0]
                                    cand = T.if_then_else(order_key(vals[0]) == top, head, T.int32(no_expert))
                                    winner = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF),
                                                           cand)
                                    if lane == num_topk - 1 - r:
                                        my_idx = winner
                                    won[0] = T.if_then_else(winner == head, 1, 0)  # before idx[0] changes
                                    for j in T.unroll(epl - 1):
                                        if j < r:
                                            vals[j] = T.if_then_else(won[0] != 0, vals[j + 1], vals[j])
                                            idx[j] = T.if_then_else(won[0] != 0, idx[j + 1], idx[j])
                            else:
                                for k in T.serial(num_topk):
                                    top = T.call_extern("int32", "__reduce_max_sync", T.uint32(0xFFFFFFFF),
                                                        order_key(vals[0]))
                                    head = idx[0]
                                    cand = T.if_then_else(order_key(vals[0]) == top, head, T.int32(no_expert))
                                    winner = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF),
                                                           cand)
                                    if lane == k:
                                        my_idx = winner
                                    if winner == head:
                                        for j in T.unroll(epl - 1):
                                            vals[j] = vals[j + 1]
                                            idx[j] = idx[j + 1]
                                        vals[epl - 1] = neg_inf
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
                                hashed = T.Cast("int64", ep_rank) + T.Cast("int64", token) * PHYSICAL_HASH
                                count = logical_count[e]
                                if count > 0 and hashed < T.int64(2147483647):
                                    # both operands fit int32 and are non-negative: a 32-bit remainder
                                    # equals the floor modulo (the 64-bit one is a long software routine)
                                    e = to_physical_map[T.Cast("int64", e) * map_cols +
                                                        T.truncmod(T.Cast("int32", hashed), count)]
                                else:
                                    e = to_physical_map[T.Cast("int64", e) * map_cols +
                                                        hashed % T.Cast("int64", count)]
                            if e >= 0 and num_tp_ranks != 1:  # expert-TP masking and local renumbering
                                # (with one TP rank, tp_rank is 0 and both steps are the identity)
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
