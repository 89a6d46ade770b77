"""mhc_pre_norm_fn_bwd_mul: the gradients of the pre-norm projection, x_grad accumulated in place and fn_grad
written (spec: the contract's doc, kernelkiln_contract.mhc_norm_fn).

Tile level: a CTA owns BWD_HIDDEN columns of every token and keeps the weight's slice (padded to PAD_ROWS rows with
zeros) in shared memory. It walks the tokens in blocks of BWD_TOKENS, serially and in token order, so fn_grad is a
register accumulator that no other CTA touches (deterministic, no atomics). Per block: x widened to fp32 and the
out_mul_grad rows (zero-padded to PAD_ROWS columns) in shared memory, the old x_grad as the second GEMM's
accumulator, then fn_grad += gᵀ·x and x_grad += g·fn (mma.sync TF32: WGMMA is off, as the peer's), the fma with
2·x·sqrsum_grad and one rounding to bf16.

Every global access is guarded in the kernel (token tail, the m3 padding), so the automatic guards are off. Shared
memory: x 64 KB + the gradient rows 16 KB + the weight slice 16 KB = 96 KB, one stage (a second stage of x would
not fit in 99 KB).
"""
from kernelkiln_contract.mhc_norm_fn import BWD_HIDDEN as HB
from kernelkiln_contract.mhc_norm_fn import BWD_TOKENS as TB
from kernelkiln_contract.mhc_norm_fn import PAD_ROWS as ROWS
from kernelkiln_contract.mhc_norm_fn import BWD_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_norm_fn (MHC_PRE_NORM_FN_BWD_MUL): dtype, and the launch-argument names below,
# which the build checks against this PrimFunc.
PASS_CONFIGS = {"tl.disable_wgmma": True, "tl.disable_safe_memory_legalize": True}


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    num_tokens, hidden, mhc_mult3 = T.dynamic("num_tokens, hidden, mhc_mult3")
    zero = T.float32(0)

    @T.prim_func
    def mhc_pre_norm_fn_bwd_mul(
        out_mul_grad: T.Tensor((num_tokens, mhc_mult3), f32),  # [n, 1, m3], TF32-rounded by the caller
        sqrsum_grad: T.Tensor((num_tokens,), f32),  # [n, 1]
        x: T.Tensor((num_tokens, hidden), "bfloat16"),
        fn: T.Tensor((mhc_mult3, hidden), f32),
        x_grad: T.Tensor((num_tokens, hidden), "bfloat16"),  # accumulated
        fn_grad: T.Tensor((mhc_mult3, hidden), f32),  # written
    ):
        with T.Kernel(T.ceildiv(hidden, HB), threads=THREADS) as bx:
            fn_s = T.alloc_shared((ROWS, HB), f32)
            x_s = T.alloc_shared((TB, HB), f32)
            g_s = T.alloc_shared((TB, ROWS), f32)
            fn_acc = T.alloc_fragment((ROWS, HB), f32)
            xg = T.alloc_fragment((TB, HB), f32)
            sg = T.alloc_fragment((TB,), f32)
            c0 = bx * HB
            T.pdl_sync()
            for i, j in T.Parallel(ROWS, HB):
                fn_s[i, j] = T.if_then_else(i < mhc_mult3, fn[i, c0 + j], zero)
            T.clear(fn_acc)
            for tb in T.serial(T.ceildiv(num_tokens, TB)):
                t0 = tb * TB
                # rows past the last token are zeros in both GEMM operands: a zero in one alone keeps 0 · NaN = NaN
                for i, j in T.Parallel(TB, HB):
                    x_s[i, j] = T.if_then_else(t0 + i < num_tokens, T.Cast(f32, x[t0 + i, c0 + j]), zero)
                for i, j in T.Parallel(TB, ROWS):
                    g_s[i, j] = T.if_then_else(t0 + i < num_tokens and j < mhc_mult3, out_mul_grad[t0 + i, j], zero)
                for i, j in T.Parallel(TB, HB):
                    xg[i, j] = T.if_then_else(t0 + i < num_tokens, T.Cast(f32, x_grad[t0 + i, c0 + j]), zero)
                for i in T.Parallel(TB):
                    sg[i] = T.if_then_else(t0 + i < num_tokens, sqrsum_grad[t0 + i], zero)
                T.gemm(g_s, x_s, fn_acc, transpose_A=True)
                T.gemm(g_s, fn_s, xg)
                for i, j in T.Parallel(TB, HB):
                    if t0 + i < num_tokens:
                        # 2·x is exact: one fma, then one rounding to bf16
                        x_grad[t0 + i, c0 + j] = T.Cast(
                            "bfloat16", T.call_extern(f32, "__fmaf_rn", x_s[i, j] * T.float32(2), sg[i], xg[i, j]))
            for i, j in T.Parallel(ROWS, HB):
                if i < mhc_mult3:
                    fn_grad[i, c0 + j] = fn_acc[i, j]
            T.pdl_trigger()

    return mhc_pre_norm_fn_bwd_mul
