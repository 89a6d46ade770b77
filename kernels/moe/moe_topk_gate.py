"""moe_topk_gate_forward: the tile_kernels 2.1 sqrt-softplus fused router (docs/SPEC.md §2.3, §3.1, §3.7).

One warp per token; lane L holds experts [L*EPL, L*EPL + EPL) (EPL = ceil(E / 32)) in registers:
s = sqrt(x > 20 ? x : log1p(exp(x))) (expf, log1pf, sqrtf: torch's CUDA formula) and the ranking
score b = s + bias (image_bias for image tokens; no bias: b = s).

* Routed rows: the lane sorts its b once (stable odd-even transposition), then K rounds of redux.max
  over order-preserving int keys and redux.min over the expert indices of equal heads (ties -> the
  smaller index), as topk_gate.py. Fixed rows take unmapped_topk_idx instead (outside [0, E): -1).
* Lane k < K fetches s of its expert from the owner lane; D = xor-butterfly sum (16, 8, 4, 2, 1) of
  the lanes' s (0 beyond K) + 1e-20; w_k = s_k / D * rsf. Lanes K..K+S-1: expert E + j, weight 1.
  Then the EPLB map phys = map[e, (ep_rank + token * 23333) % logical_count[e]].
* force_random rows: curand Philox4_32_10 written out here (key = (ep_rank, 0), counter = (0, 0,
  token * 32 + lane as 64 bits)): word x -> curand_uniform weight, word y % (N - lane) -> draw; P = K+S
  rounds of warp-min "insert and shift" make the draws distinct physical ids in [0, N), N = sum of
  logical_count (or E + S). Unmapped -1, scores 0, no map.
* Masked rows: idx -1, weight 0, unmapped -1, scores 0.

Non-finite logits of a routed row do not trap: the row becomes -1 / 0 and the token goes to ``err``
(host-mapped), as in topk_gate. Every option is a runtime flag; the only compile-time parameter is EPL.
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

# Declared in kernelkiln_contract.moe (MOE_TOPK_GATE): experts per lane (ceil(E / 32)), and the launch-argument
# names below, which the build checks against this PrimFunc.

# flags
MASK, FIX, MAP, UNMAPPED, VEC4, BIAS, IMAGE, RANDOM, SCORES = 1, 2, 4, 8, 16, 32, 64, 128, 256


def build(p, arch):
    import tilelang.language as T

    del arch
    epl = p["experts_per_lane"]
    sort_lane = lane_sort(T, epl)
    load_row = lane_row_loader(T, epl)
    neg_inf = T.float32(float("-inf"))
    no_expert = 1 << 20  # larger than any expert index: loses every redux.min
    int_max = 2**31 - 1
    logits_numel, e_numel, t_numel, map_numel, cnt_numel, un_numel, out_numel = T.dynamic(
        "logits_numel, e_numel, t_numel, map_numel, cnt_numel, un_numel, out_numel")


    def has(flags, bit):
        return T.bitwise_and(flags, bit) != 0

    @T.prim_func
    def moe_topk_gate(
        logits: T.Tensor((logits_numel,), "float32"),
        bias: T.Tensor((e_numel,), "float32"),
        image_bias: T.Tensor((e_numel,), "float32"),
        image_mask: T.Tensor((t_numel,), "uint8"),
        mask: T.Tensor((t_numel,), "uint8"),
        fix_mask: T.Tensor((t_numel,), "uint8"),
        rand_mask: T.Tensor((t_numel,), "uint8"),
        to_physical_map: T.Tensor((map_numel,), "int32"),
        logical_count: T.Tensor((cnt_numel,), "int32"),
        unmapped: T.Tensor((un_numel,), "int64"),
        scores: T.Tensor((logits_numel,), "float32"),
        topk_idx: T.Tensor((out_numel,), "int64"),
        topk_weights: T.Tensor((out_numel,), "float32"),
        err: T.Tensor((2,), "int32"),
        num_tokens: T.int32,
        num_experts: T.int32,
        experts_div4: T.int32,
        num_topk: T.int32,
        num_shared: T.int32,
        routed_scaling_factor: T.float32,
        ep_rank: T.int32,
        map_cols: T.int32,
        num_logical: T.int32,  # E + S (rows of the map)
        unmapped_stride: T.int32,
        flags: T.int32,
    ):
        with T.Kernel(T.ceildiv(num_tokens, WARPS_PER_CTA), threads=32 * WARPS_PER_CTA) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            token = bx * WARPS_PER_CTA + tx // 32
            base = lane * epl
            x = T.alloc_local((epl,), "float32")
            vals = T.alloc_local((epl,), "float32")
            unb = T.alloc_local((epl,), "float32")
            bb = T.alloc_local((epl,), "float32")
            tmp = T.alloc_local((epl,), "float32")
            idx = T.alloc_local((epl,), "int32")
            swap_f = T.alloc_local((1,), "float32")
            swap_i = T.alloc_local((1,), "int32")
            acc = T.alloc_local((1,), "float32")
            ctr = T.alloc_local((4,), "uint32")
            key = T.alloc_local((2,), "uint32")
            nxt = T.alloc_local((4,), "uint32")
            my_idx = T.alloc_var("int32")
            sc = T.alloc_var("float32")
            den = T.alloc_var("float32")
            w = T.alloc_var("float32")
            e = T.alloc_var("int32")
            bad = T.alloc_var("int32")
            draw = T.alloc_var("int32")
            fin = T.alloc_var("int32")
            nphys = T.alloc_var("int32")
            width = num_topk + num_shared
            row = T.Cast("int64", token) * num_experts
            out_row = T.Cast("int64", token) * width
            un_row = T.Cast("int64", token) * unmapped_stride

            T.pdl_sync()
            if token < num_tokens:
                active = not has(flags, MASK) or mask[token] != T.uint8(0)
                rand = has(flags, RANDOM) and rand_mask[token] != T.uint8(0)
                if not active or rand:
                    if has(flags, SCORES):
                        for j in T.unroll(epl):
                            if base + j < num_experts:
                                scores[row + base + j] = T.float32(0)
                    if has(flags, UNMAPPED) and lane < num_topk:
                        unmapped[un_row + lane] = T.int64(-1)
                if not active:
                    if lane < width:
                        topk_idx[out_row + lane] = T.int64(-1)
                        topk_weights[out_row + lane] = T.float32(0)
                elif rand:
                    # N = physical experts: sum of logical_count (warp reduction) or E + S
                    nphys = num_experts + num_shared
                    if has(flags, MAP):
                        nphys = 0
                        for i in T.serial(T.ceildiv(num_logical, 32)):
                            if i * 32 + lane < num_logical:
                                nphys = nphys + logical_count[i * 32 + lane]
                        nphys = T.call_extern("int32", "__reduce_add_sync", T.uint32(0xFFFFFFFF), nphys)
                    # curand_init(ep_rank, token * 32 + lane, 0): counter (0, 0, sub lo, sub hi), key (seed lo, hi)
                    sub = T.Cast("int64", token) * 32 + T.Cast("int64", lane)
                    ctr[0] = T.uint32(0)
                    ctr[1] = T.uint32(0)
                    ctr[2] = T.Cast("uint32", T.bitwise_and(sub, T.int64(0xFFFFFFFF)))
                    ctr[3] = T.Cast("uint32", T.shift_right(sub, T.int64(32)))
                    key[0] = T.Cast("uint32", ep_rank)
                    key[1] = T.uint32(0)
                    for r in T.unroll(10):
                        if r > 0:
                            key[0] = key[0] + T.uint32(0x9E3779B9)
                            key[1] = key[1] + T.uint32(0xBB67AE85)
                        nxt[0] = T.bitwise_xor(T.bitwise_xor(
                            T.call_extern("uint32", "__umulhi", T.uint32(0xCD9E8D57), ctr[2]), ctr[1]), key[0])
                        nxt[1] = T.uint32(0xCD9E8D57) * ctr[2]
                        nxt[2] = T.bitwise_xor(T.bitwise_xor(
                            T.call_extern("uint32", "__umulhi", T.uint32(0xD2511F53), ctr[0]), ctr[3]), key[1])
                        nxt[3] = T.uint32(0xD2511F53) * ctr[0]
                        for i in T.unroll(4):
                            ctr[i] = nxt[i]
                    # curand_uniform: float(x) * 2^-32 + 2^-33 (the product is exact)
                    w = T.Cast("float32", ctr[0]) * T.float32(2.0**-32) + T.float32(2.0**-33)
                    draw = int_max
                    fin = int_max
                    if lane < width:
                        draw = T.Cast("int32", ctr[1] % T.Cast("uint32", T.max(nphys - lane, 1)))
                        fin = -1
                    for i in T.serial(width):
                        low = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF), draw)
                        low_lane = T.call_extern("int32", "__reduce_min_sync", T.uint32(0xFFFFFFFF),
                                                 T.if_then_else(draw == low, lane, int_max))
                        if fin == -1:
                            if draw >= low and low_lane < lane:
                                draw = draw + 1
                            elif low_lane == lane:
                                fin = draw
                                draw = int_max
                    if lane < width:
                        topk_idx[out_row + lane] = T.Cast("int64", fin)
                        topk_weights[out_row + lane] = w
                else:
                    load_row(x, logits, token, lane, num_experts, experts_div4, has(flags, VEC4), T.float32(0))
                    image = has(flags, IMAGE) and image_mask[token] != T.uint8(0)
                    for j in T.unroll(epl):
                        bb[j] = T.float32(0)
                        if base + j < num_experts:
                            if image:
                                bb[j] = image_bias[base + j]
                            elif has(flags, BIAS):
                                bb[j] = bias[base + j]
                    for j in T.unroll(epl):
                        tmp[j] = T.call_extern("float32", "log1pf", T.call_extern("float32", "expf", x[j]))
                    for j in T.unroll(epl):
                        unb[j] = T.call_extern("float32", "sqrtf", T.if_then_else(x[j] > T.float32(20), x[j],
                                                                                  tmp[j]))
                    acc[0] = T.float32(0)
                    for j in T.unroll(epl):
                        vals[j] = unb[j] + bb[j]
                        acc[0] = T.call_extern("float32", "__fmaf_rn", x[j], T.float32(0), acc[0])
                    for j in T.unroll(epl):
                        if base + j >= num_experts:
                            unb[j] = T.float32(0)
                            vals[j] = neg_inf
                    if has(flags, SCORES):
                        for j in T.unroll(epl):
                            if base + j < num_experts:
                                scores[row + base + j] = unb[j]
                    bad = T.if_then_else(T.isnan(acc[0]), 1, 0)
                    if T.any_sync(bad) != 0:
                        if lane == 0:
                            err[0] = 1
                            err[1] = token
                        if lane < width:
                            topk_idx[out_row + lane] = T.int64(-1)
                            topk_weights[out_row + lane] = T.float32(0)
                    else:
                        fixed = T.bitwise_and(flags, FIX | UNMAPPED) == FIX | UNMAPPED and \
                            fix_mask[token] != T.uint8(0)
                        my_idx = -1
                        if fixed:
                            if lane < num_topk:
                                given = unmapped[un_row + lane]
                                if given >= T.int64(0) and given < T.Cast("int64", num_experts):
                                    my_idx = T.Cast("int32", given)
                        else:
                            for j in T.unroll(epl):
                                idx[j] = base + j
                            sort_lane(vals, idx, swap_f, swap_i)  # stable, descending (routing.lane_sort)
                            for k in T.serial(num_topk):
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
                            if has(flags, UNMAPPED) and lane < num_topk:
                                unmapped[un_row + lane] = T.Cast("int64", my_idx)
                        owner = T.max(my_idx, 0) // epl
                        slot = T.max(my_idx, 0) - owner * epl
                        sc = T.float32(0)
                        for j in T.unroll(epl):
                            v = T.shfl_sync(unb[j], owner)
                            if slot == j and my_idx >= 0:
                                sc = v
                        den = sc
                        for s in T.unroll(5):
                            den = den + T.shfl_xor(den, 16 >> s)
                        den = den + T.float32(EPS)
                        w = sc / den * routed_scaling_factor
                        e = my_idx
                        if lane >= num_topk:
                            e = num_experts + lane - num_topk
                            w = T.float32(1)
                        if lane < width:
                            if has(flags, MAP) and e >= 0:
                                hashed = T.Cast("int64", ep_rank) + T.Cast("int64", token) * PHYSICAL_HASH
                                count = T.max(logical_count[e], 1)
                                e = to_physical_map[T.Cast("int64", e) * map_cols + hashed % T.Cast("int64", count)]
                            topk_idx[out_row + lane] = T.Cast("int64", e)
                            topk_weights[out_row + lane] = w
            T.pdl_trigger()

    return moe_topk_gate
