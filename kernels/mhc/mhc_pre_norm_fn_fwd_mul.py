"""mhc_pre_norm_fn_fwd_mul: the pre-norm projection x·fnᵀ on TF32 tensor cores and the row sums of squares (spec:
the contract's doc, kernelkiln_contract.mhc_norm_fn).

Tile level: a CTA owns FWD_TOKENS tokens and the weight padded to PAD_ROWS rows. Each step of the pipelined loop
brings one FWD_HIDDEN-column slice of x (bf16) and of fn (fp32) into shared memory by TMA (the loads past the
weight's m3 rows or the last token read zeros, which is how the padding and the token tail cost no guard), widens x
to fp32 in registers and feeds it as the MMA's A operand. WGMMA is off: a 32-token tile is below its 64-row minimum,
so the GEMM is mma.sync m16n8k8 TF32, as the peer's.

The sum of squares uses the register layout of that A operand: an m16n8k8 thread holds the columns c ≡ lane (mod 4)
of its rows, so a [tokens, 4] accumulator is updated without any data movement, and one 4-lane butterfly finishes
it. Its order (stated in the contract) was read from the lowered source of both arches. The automatic out-of-bounds
guards are off: the TMA loads are bounded by the hardware and the stores are guarded here.

One pipeline stage, not two: with 2 or 3 stages the H200 runs of eaa11d0 and c5644ad (scripts/diag_norm_fn.py)
found the first 8 token rows of some tiles widened from wrong data, different tokens from run to run, with the
SASS showing every load of a stage between its barrier wait and its release and compute-sanitizer reporting no
hazard. The cause is not found; one stage gave 20 identical runs equal to the ordered reference.
"""
from kernelkiln_contract.mhc_norm_fn import FWD_HIDDEN as HB
from kernelkiln_contract.mhc_norm_fn import FWD_STAGES as STAGES
from kernelkiln_contract.mhc_norm_fn import FWD_TOKENS as TB
from kernelkiln_contract.mhc_norm_fn import PAD_ROWS as ROWS
from kernelkiln_contract.mhc_norm_fn import SQ_LANES as LANES
from kernelkiln_contract.mhc_norm_fn import FWD_THREADS as THREADS

# Declared in kernelkiln_contract.mhc_norm_fn (MHC_PRE_NORM_FN_FWD_MUL): dtype, and the launch-argument names below,
# which the build checks against this PrimFunc.
PASS_CONFIGS = {"tl.disable_wgmma": True, "tl.disable_safe_memory_legalize": True}


def build(p, arch):
    import tilelang.language as T

    del arch
    f32 = p["dtype"]
    num_tokens, hidden, mhc_mult3 = T.dynamic("num_tokens, hidden, mhc_mult3")

    @T.prim_func
    def mhc_pre_norm_fn_fwd_mul(
        x: T.Tensor((num_tokens, hidden), "bfloat16"),
        fn: T.Tensor((mhc_mult3, hidden), f32),  # TF32-rounded by the caller
        out_mul: T.Tensor((num_tokens, mhc_mult3), f32),  # [n, 1, m3] viewed flat
        sqrsum: T.Tensor((num_tokens,), f32),  # [n, 1]
    ):
        with T.Kernel(T.ceildiv(num_tokens, TB), threads=THREADS) as bx:
            x_s = T.alloc_shared((TB, HB), "bfloat16")
            fn_s = T.alloc_shared((ROWS, HB), f32)
            x_f = T.alloc_fragment((TB, HB), f32)
            acc = T.alloc_fragment((TB, ROWS), f32)
            sq = T.alloc_fragment((TB, LANES), f32)
            sq_row = T.alloc_fragment((TB,), f32)
            t0 = bx * TB
            T.pdl_sync()
            T.clear(acc)
            T.clear(sq)
            for kb in T.Pipelined(T.ceildiv(hidden, HB), num_stages=STAGES):
                T.copy(x[t0, kb * HB], x_s)
                T.copy(fn[0, kb * HB], fn_s)
                T.copy(x_s, x_f)
                for c in T.serial(HB // LANES):
                    for i, j in T.Parallel(TB, LANES):
                        sq[i, j] += x_f[i, c * LANES + j] * x_f[i, c * LANES + j]
                T.gemm(x_f, fn_s, acc, transpose_B=True)
            T.reduce_sum(sq, sq_row, dim=1)
            for i in T.Parallel(TB):
                if t0 + i < num_tokens:
                    sqrsum[t0 + i] = sq_row[i]
            for i, j in T.Parallel(TB, ROWS):
                if t0 + i < num_tokens and j < mhc_mult3:
                    out_mul[t0 + i, j] = acc[i, j]
            T.pdl_trigger()

    return mhc_pre_norm_fn_fwd_mul
