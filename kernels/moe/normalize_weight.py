"""normalize_weight: each row of [T, K] fp32 divided by its sum (docs/SPEC.md §2.3, §3.1).

The sum is the router's: a warp butterfly with xor offsets 16, 8, 4, 2, 1 where
lane k holds w[k] (0 beyond K), plus 1e-20. Here a row occupies only G lanes
(G = the power of two >= K, a runtime argument), so a warp serves 32 / G rows
and the loads of a warp are contiguous. Skipping the offsets >= G is
bit-identical: in the full-warp order those rounds only add +0.0 to each value,
which can change the sign of a zero but no other bit of any later partial sum,
and the final + 1e-20 makes a +-0 sum the same denominator.

No compile-time specialization is needed (``threads`` only names the CTA size).
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.moe (NORMALIZE_WEIGHT): the CTA size, and the launch-argument names below, which
# the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL
EPS = 1e-20


def build(p, arch):
    import tilelang.language as T

    del arch
    threads = p["threads"]
    w_numel, out_numel = T.dynamic("w_numel, out_numel")

    @T.prim_func
    def normalize_weight(
        w: T.Tensor((w_numel,), "float32"),
        denominator: T.Tensor((out_numel,), "float32"),  # [T]
        out: T.Tensor((out_numel,), "float32"),  # [T, K] contiguous
        num_tokens: T.int32,
        num_topk: T.int32,
        w_stride: T.int32,  # row stride of w in elements
        group_shift: T.int32,  # log2(G), G = lanes per row
        num_ctas: T.int32,  # ceil(num_tokens * G / threads)
    ):
        with T.Kernel(num_ctas, threads=threads) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_var("float32")
            mine = T.alloc_var("float32")
            group = T.shift_left(1, group_shift)
            gid = bx * threads + tx
            row = T.shift_right(gid, group_shift)
            k = T.bitwise_and(gid, group - 1)
            live = row < num_tokens and k < num_topk
            T.pdl_sync()
            mine = T.float32(0)
            if live:
                mine = w[T.Cast("int64", row) * w_stride + k]
            v = mine
            for s in T.unroll(5):
                offset = 16 >> s
                if offset < group:  # uniform over the warp: every lane shuffles together
                    v = v + T.shfl_xor(v, offset)
            v = v + T.float32(EPS)
            if row < num_tokens:
                if k == 0:
                    denominator[row] = v
                if k < num_topk:
                    out[T.Cast("int64", row) * num_topk + k] = mine / v
            T.pdl_trigger()

    return normalize_weight
