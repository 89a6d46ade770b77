"""mhc_fn_normw_merge_fwd: the mix weights with the RMS-norm weight folded in, ``fn · normw`` per column (spec:
the contract's doc, kernelkiln_contract.mhc_mixes).

Grid (column blocks, rows); a thread takes 4 contiguous columns of one row (16-byte loads of fn and normw, one
store). Thread level: tile copies of runtime-sized buffers get per-element guards that split the vector accesses.
"""
from kernels.common.passes import THREAD_LEVEL as PASS_CONFIGS  # noqa: F401
from kernelkiln_contract.mhc_mixes import MERGE_FWD_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_mixes (MHC_FN_NORMW_MERGE_FWD): dtype, and the launch-argument names below,
# which the build checks against this PrimFunc.
VEC = 4


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    n_fn, n_w = T.dynamic("n_fn, n_w")

    @T.prim_func
    def mhc_fn_normw_merge_fwd(
        fn: T.Tensor((n_fn,), f32),  # [rows, cols]
        normw: T.Tensor((n_w,), f32),  # [cols]
        out_fn: T.Tensor((n_fn,), f32),  # [rows, cols]
        num_rows: T.int32,
        num_col_vecs: T.int32,  # cols / 4
    ):
        with T.Kernel(T.ceildiv(num_col_vecs, THREADS), num_rows, threads=THREADS) as (bx, row):
            tx = T.get_thread_binding()
            f = T.alloc_local((VEC,), f32)
            w = T.alloc_local((VEC,), f32)
            o = T.alloc_local((VEC,), f32)
            T.pdl_sync()
            cv = bx * THREADS + tx
            if cv < num_col_vecs:
                at = (T.Cast("int64", row) * num_col_vecs + cv) * VEC
                for j in T.vectorized(VEC):
                    f[j] = fn[at + j]
                for j in T.vectorized(VEC):
                    w[j] = normw[cv * VEC + j]
                for j in T.unroll(VEC):
                    o[j] = T.call_extern(f32, "__fmul_rn", f[j], w[j])
                for j in T.vectorized(VEC):
                    out_fn[at + j] = o[j]
            T.pdl_trigger()

    return mhc_fn_normw_merge_fwd
