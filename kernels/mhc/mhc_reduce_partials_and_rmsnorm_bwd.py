"""mhc_reduce_partials_and_rmsnorm_bwd: the gradients of the summed partials and of the squared sums through the
RMS factor (spec: the contract's doc, kernelkiln_contract.mhc_mixes).

One thread per (token, group) row of m3 values, walked in 4-column pieces (16-byte loads and stores): the
out_mul gradient piece by piece, and the dot product Σ_j out_grad_j · out_mul_j by one fma per column in column
order. Thread level: that order decides sqrsum_grad's bits.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import RMS_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_REDUCE_PARTIALS_AND_RMSNORM_BWD): dtype, and the launch-argument
# names below, which the build checks against this PrimFunc.
VEC = 4


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    n_og, n_om, n_sq = T.dynamic("n_og, n_om, n_sq")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    def add(a, b):
        return T.call_extern(f32, "__fadd_rn", a, b)

    def mul(a, b):
        return T.call_extern(f32, "__fmul_rn", a, b)

    def div(a, b):
        return T.call_extern(f32, "__fdiv_rn", a, b)

    @T.prim_func
    def mhc_reduce_partials_and_rmsnorm_bwd(
        out_grad: T.Tensor((n_og,), f32),  # [n, m3]
        out_mul: T.Tensor((n_om,), f32),  # [n, G, m3]
        sqrsum: T.Tensor((n_sq,), f32),  # [n, G]
        out_mul_grad: T.Tensor((n_om,), f32),  # [n, G, m3]
        sqrsum_grad: T.Tensor((n_sq,), f32),  # [n, G]
        num_rows: T.int32,  # n · G
        n_rms_group: T.int32,  # G
        num_col_vecs: T.int32,  # m3 / 4
        rms_group_size: T.int32,
        rms_eps: T.float32,
        rms_eps_group: T.float32,  # fp32(rms_eps · rms_group_size), the product taken in float64 on the host
    ):
        with T.Kernel(T.ceildiv(num_rows, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            og = T.alloc_local((VEC,), f32)
            om = T.alloc_local((VEC,), f32)
            gr = T.alloc_local((VEC,), f32)
            acc = T.alloc_var(f32)
            sq = T.alloc_var(f32)
            r = T.alloc_var(f32)
            T.pdl_sync()
            i = bx * THREADS + tx
            if i < num_rows:
                i64 = T.Cast("int64", i)
                t64 = T.Cast("int64", T.truncdiv(i, n_rms_group))
                sq = sqrsum[i64]
                r = T.rsqrt(add(div(sq, T.Cast(f32, rms_group_size)), rms_eps))
                acc = T.float32(0)
                for c in T.serial(num_col_vecs):
                    for j in T.vectorized(VEC):
                        og[j] = out_grad[(t64 * num_col_vecs + c) * VEC + j]
                    for j in T.vectorized(VEC):
                        om[j] = out_mul[(i64 * num_col_vecs + c) * VEC + j]
                    for j in T.unroll(VEC):
                        gr[j] = mul(og[j], r)
                        acc = fma(og[j], om[j], acc)
                    for j in T.vectorized(VEC):
                        out_mul_grad[(i64 * num_col_vecs + c) * VEC + j] = gr[j]
                sqrsum_grad[i64] = div(div(mul(acc, r), add(sq, rms_eps_group)), T.float32(-2))
            T.pdl_trigger()

    return mhc_reduce_partials_and_rmsnorm_bwd
