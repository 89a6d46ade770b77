"""topk_sum_and_topk_group_idx: the best groups of a grouped score row (v1; docs/SPEC.md §2.3, §3.1).

scores [T, G, E/G] fp32 contiguous, G <= 32. One warp per token:

* Group g is served by the lanes [g, g + 1) * LPG, LPG = the largest power of two with
  G * LPG <= 32 (a runtime shift; lanes beyond G * LPG only feed -inf to the shuffles).
  Lane `sub` of a group reads the group's elements sub, sub + LPG, ... (or 16-byte chunks
  of 4 when E/G % 4 == 0: a runtime flag), so a warp's loads of one step are contiguous
  runs and the whole row is read exactly once.
* Each lane keeps the top-2 of its values as a multiset (an equal second value counts),
  then the group's lanes merge them with xor shuffles (offsets < LPG). The group score is
  top1 (num_topk_sum 1) or the fp32 sum top1 + top2 (num_topk_sum 2): one addition of the
  same two values as the reference's topk(2).values sum, so it is bit-identical.
* rank(g) = the number of groups that beat g (a larger score, or an equal one and a lower
  id); the group's lanes share these comparisons and add their counts with xor shuffles.
  Ranks are distinct, and the group with rank r < num_topk_groups is out[token, r].

Every size is a runtime argument, so one cubin serves every (T, G, E/G, k) and the only
compile-time parameter names the CTA size. Non-finite scores are not checked (the order
among NaNs is unspecified, as in the reference).
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.moe (TOPK_SUM_AND_TOPK_GROUP_IDX): the CTA size, and the launch-argument names
# below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL
MAX_GROUPS = 32


def build(p, arch):
    import tilelang.language as T

    del arch
    threads = p["threads"]
    warps = threads // 32
    neg_inf = T.float32(float("-inf"))
    s_numel, out_numel = T.dynamic("s_numel, out_numel")

    @T.prim_func
    def topk_sum_and_topk_group_idx(
        scores: T.Tensor((s_numel,), "float32"),  # [T, G, EPG] contiguous
        out: T.Tensor((out_numel,), "int64"),  # [T, num_topk_groups] contiguous
        num_tokens: T.int32,
        num_groups: T.int32,  # G
        experts_per_group: T.int32,  # EPG = E / G
        num_topk_sum: T.int32,  # 1 or 2
        num_topk_groups: T.int32,
        lpg_shift: T.int32,  # log2(lanes per group)
        vec4: T.int32,  # 1: EPG % 4 == 0 and 16-byte aligned rows -> float4 loads
    ):
        with T.Kernel(T.ceildiv(num_tokens, warps), threads=threads) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            token = bx * warps + tx // 32
            x = T.alloc_local((4,), "float32")
            m1 = T.alloc_var("float32")
            m2 = T.alloc_var("float32")
            o1 = T.alloc_var("float32")
            o2 = T.alloc_var("float32")
            gs = T.alloc_var("float32")
            rank = T.alloc_var("int32")
            lpg = T.shift_left(1, lpg_shift)
            my_group = T.shift_right(lane, lpg_shift)
            sub = T.bitwise_and(lane, lpg - 1)
            live = my_group < num_groups
            # row start in elements; E = G * EPG
            row = T.Cast("int64", token) * (num_groups * experts_per_group)
            T.pdl_sync()
            if token < num_tokens:  # uniform over the warp
                m1 = neg_inf
                m2 = neg_inf
                if vec4 != 0:
                    chunks = T.shift_right(experts_per_group, 2)
                    for i in T.serial(T.shift_right(chunks + lpg - 1, lpg_shift)):
                        c = sub + T.shift_left(i, lpg_shift)
                        if live and c < chunks:
                            # (row / 4 + group chunk + c) * 4 + i: 16-byte aligned by construction
                            for j in T.vectorized(4):
                                x[j] = scores[(T.shift_right(row, 2) + T.Cast("int64", my_group * chunks + c)) * 4
                                              + j]
                            for j in T.unroll(4):
                                m2 = T.max(m2, T.min(m1, x[j]))
                                m1 = T.max(m1, x[j])
                else:
                    for i in T.serial(T.shift_right(experts_per_group + lpg - 1, lpg_shift)):
                        e = sub + T.shift_left(i, lpg_shift)
                        if live and e < experts_per_group:
                            x[0] = scores[row + T.Cast("int64", my_group * experts_per_group + e)]
                            m2 = T.max(m2, T.min(m1, x[0]))
                            m1 = T.max(m1, x[0])
                # merge the group's lanes (every lane shuffles: the offsets are uniform)
                for s in T.unroll(5):
                    offset = 16 >> s
                    if offset < lpg:
                        o1 = T.shfl_xor(m1, offset)
                        o2 = T.shfl_xor(m2, offset)
                        m2 = T.max(T.min(m1, o1), T.max(m2, o2))
                        m1 = T.max(m1, o1)
                gs = m1
                if num_topk_sum == 2:
                    gs = m1 + m2
                # rank: lane `sub` compares the groups gi * LPG + sub, then the group adds the counts
                rank = 0
                for gi in T.serial(T.shift_right(num_groups + lpg - 1, lpg_shift)):
                    g = T.shift_left(gi, lpg_shift) + sub
                    other = T.shfl_sync(gs, T.bitwise_and(T.shift_left(g, lpg_shift), 31))
                    if g < num_groups and (other > gs or (other == gs and g < my_group)):
                        rank = rank + 1
                for s in T.unroll(5):
                    offset = 16 >> s
                    if offset < lpg:
                        rank = rank + T.shfl_xor(rank, offset)
                if live and sub == 0 and rank < num_topk_groups:
                    out[T.Cast("int64", token) * num_topk_groups + rank] = T.Cast("int64", my_group)
            T.pdl_trigger()

    return topk_sum_and_topk_group_idx
