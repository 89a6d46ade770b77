"""mhc_fn_normw_merge_bwd: the gradients of ``fn · normw``, accumulated in place (spec: the contract's doc,
kernelkiln_contract.mhc_mixes).

A thread owns 4 contiguous columns (256 per CTA of 64 threads) and walks the rows in order: one fma into fn_grad per
element, one fma into its normw accumulator, then a single add into normw_grad. Thread level: the row order of the
normw sum is what makes it bit-exact.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import MERGE_BWD_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_FN_NORMW_MERGE_BWD): dtype, and the launch-argument names below,
# which the build checks against this PrimFunc.
VEC = 4


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    n_fn, n_w = T.dynamic("n_fn, n_w")

    def fma(a, b, c):
        return T.call_extern(f32, "__fmaf_rn", a, b, c)

    @T.prim_func
    def mhc_fn_normw_merge_bwd(
        fn: T.Tensor((n_fn,), f32),  # [rows, cols]
        normw: T.Tensor((n_w,), f32),  # [cols]
        out_fn_grad: T.Tensor((n_fn,), f32),  # [rows, cols]
        fn_grad: T.Tensor((n_fn,), f32),  # [rows, cols], accumulated
        normw_grad: T.Tensor((n_w,), f32),  # [cols], accumulated
        num_rows: T.int32,
        num_col_vecs: T.int32,  # cols / 4
    ):
        with T.Kernel(T.ceildiv(num_col_vecs, THREADS), threads=THREADS) as bx:
            tx = T.get_thread_binding()
            w = T.alloc_local((VEC,), f32)
            f = T.alloc_local((VEC,), f32)
            g = T.alloc_local((VEC,), f32)
            fg = T.alloc_local((VEC,), f32)
            acc = T.alloc_local((VEC,), f32)
            T.pdl_sync()
            cv = bx * THREADS + tx
            if cv < num_col_vecs:
                for j in T.vectorized(VEC):
                    w[j] = normw[cv * VEC + j]
                for j in T.unroll(VEC):
                    acc[j] = T.float32(0)
                for r in T.serial(num_rows):
                    at = (T.Cast("int64", r) * num_col_vecs + cv) * VEC
                    for j in T.vectorized(VEC):
                        g[j] = out_fn_grad[at + j]
                    for j in T.vectorized(VEC):
                        f[j] = fn[at + j]
                    for j in T.vectorized(VEC):
                        fg[j] = fn_grad[at + j]
                    for j in T.unroll(VEC):
                        fg[j] = fma(g[j], w[j], fg[j])
                        acc[j] = fma(g[j], f[j], acc[j])
                    for j in T.vectorized(VEC):
                        fn_grad[at + j] = fg[j]
                for j in T.vectorized(VEC):
                    fg[j] = normw_grad[cv * VEC + j]
                for j in T.unroll(VEC):
                    fg[j] = T.call_extern(f32, "__fadd_rn", fg[j], acc[j])
                for j in T.vectorized(VEC):
                    normw_grad[cv * VEC + j] = fg[j]
            T.pdl_trigger()

    return mhc_fn_normw_merge_bwd
