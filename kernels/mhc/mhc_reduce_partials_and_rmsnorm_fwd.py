"""mhc_reduce_partials_and_rmsnorm_fwd: the split-K partials of the pre-norm GEMM summed, the RMS factor of each
group, and the normalized mixes (spec: the contract's doc, kernelkiln_contract.mhc_mixes).

A thread owns 4 contiguous columns of one token (m3 / 4 threads per token, m3 a multiple of 4), so consecutive
threads read consecutive 16-byte pieces of every split's plane. Each thread sums the splits of its group's sqrsum
itself (the token's threads read the same words: one transaction) and the first of them stores it. Thread level: the
split order, the division, the add and the fma over groups are pinned (mhc_pre_big_fuse_fwd reproduces them).
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import RMS_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_REDUCE_PARTIALS_AND_RMSNORM_FWD): dtype, and the launch-argument
# names below, which the build checks against this PrimFunc.
VEC = 4


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    n_oms, n_sqs, n_om, n_sq, n_out = T.dynamic("n_oms, n_sqs, n_om, n_sq, n_out")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def mul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    @T.prim_func
    def mhc_reduce_partials_and_rmsnorm_fwd(
        out_mul_splitted: T.Tensor((n_oms,), f32),  # [S, n, G, m3]
        sqrsum_splitted: T.Tensor((n_sqs,), f32),  # [S, n, G]
        out_mul: T.Tensor((n_om,), f32),  # [n, G, m3]
        sqrsum: T.Tensor((n_sq,), f32),  # [n, G]
        out: T.Tensor((n_out,), f32),  # [n, m3]
        num_tokens: T.int32,
        n_rms_group: T.int32,  # G
        num_col_vecs: T.int32,  # m3 / 4
        rms_group_size: T.int32,
        rms_eps: T.float32,
        n_splits: T.int32,  # S
    ):
        with T.Kernel(T.ceildiv(num_tokens * num_col_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            o = T.alloc_local((VEC,), f32)
            s = T.alloc_local((VEC,), f32)
            x = T.alloc_local((VEC,), f32)
            sq = T.alloc_var(f32)
            r = T.alloc_var(f32)
            T.pdl_sync()
            i = bx * THREADS + tx
            t = T.truncdiv(i, num_col_vecs)
            cv = i - t * num_col_vecs  # the thread's 4-column piece
            if t < num_tokens:
                t64 = T.Cast("int64", t)
                gs = T.Cast(f32, rms_group_size)
                for j in T.unroll(VEC):
                    o[j] = T.float32(0)
                for g in T.serial(n_rms_group):
                    sq = T.float32(0)
                    for sp in T.serial(n_splits):
                        sq = add(sq, sqrsum_splitted[(T.Cast("int64", sp) * num_tokens + t64) * n_rms_group + g])
                    if cv == 0:
                        sqrsum[t64 * n_rms_group + g] = sq
                    r = T.rsqrt(add(T.call_extern(f32, "__fdiv_rn", sq, gs), rms_eps))
                    for j in T.unroll(VEC):
                        s[j] = T.float32(0)
                    for sp in T.serial(n_splits):
                        at = ((T.Cast("int64", sp) * num_tokens + t64) * n_rms_group + g) * num_col_vecs + cv
                        for j in T.vectorized(VEC):
                            x[j] = out_mul_splitted[at * VEC + j]
                        for j in T.unroll(VEC):
                            s[j] = add(s[j], x[j])
                    for j in T.vectorized(VEC):
                        out_mul[((t64 * n_rms_group + g) * num_col_vecs + cv) * VEC + j] = s[j]
                    for j in T.unroll(VEC):
                        o[j] = T.if_then_else(g == 0, mul(s[j], r), fma(s[j], r, o[j]))
                for j in T.vectorized(VEC):
                    out[(t64 * num_col_vecs + cv) * VEC + j] = o[j]
            T.pdl_trigger()

    return mhc_reduce_partials_and_rmsnorm_fwd
