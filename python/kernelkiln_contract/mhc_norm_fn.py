"""Contracts of the mHC pre-norm projection (tile_kernels 1.0 ``_mhc_pre_norm_fn_fwd_mul`` /
``_mhc_pre_norm_fn_bwd_mul``, which v1's ``mhc_pre_norm_fn`` autograd layer calls): the GEMM of the flattened
residual streams with the mix weights on TF32 tensor cores, the row's sum of squares that the RMS norm needs, and
their backward.

The specification of each op is its contract's ``doc``; docs/spec/mhc_norm_fn.md is generated from it. Notation: n
tokens, K = m·H (the flattened streams of one token), m3 = m(m+2) rows of the weight.
"""
from kernelkiln_contract._core import OpContract, Param

F32 = ("float32",)
PAD_ROWS = 32  # the weight's rows padded to one 32-wide MMA tile: m3 <= 32 (m = 4 gives 24)
FWD_THREADS = 128  # compute threads per CTA of the forward (TileLang adds a TMA producer warpgroup of its own)
BWD_THREADS = 256  # the backward holds a 128 x 128 fp32 accumulator: 128 threads would spill past 255 registers
FWD_TOKENS = 32  # tokens per CTA of the forward
FWD_HIDDEN = 256  # columns per pipelined step of the forward: K must be a multiple of it
FWD_STAGES = 1  # one shared-memory stage, 48 KB: with 2 or 3 the H200 read wrong rows (kernel docstring)
BWD_TOKENS = 128  # tokens per step of the backward's serial token loop
BWD_HIDDEN = 128  # columns per CTA of the backward: K must be a multiple of it
SQ_LANES = 4  # the forward's sum of squares runs in 4 interleaved partial sums per token

_TF32 = """\
TF32: the tensor cores use the upper 19 bits of each fp32 operand (sign, exponent, 10 mantissa bits; the low 13 bits
are ignored), multiply them exactly and add in fp32 in the hardware's order (``mma.sync.m16n8k8`` steps of 8
products, chained in k order over the tile). The callers first round the fp32 operands with ``round_to_tf32``
(kernelkiln._formats, the peer's ``(bits + 0x1000)``: adding half of the dropped range makes the truncation a
rounding half away from zero), so the tensor cores multiply the caller's rounded values; bf16 values are exact in
TF32. The sums are deterministic (a fixed instruction sequence per build and arch) but not an IEEE-specified
order: the references compute the same products in float64 and the tests compare with a derived tolerance."""

MHC_PRE_NORM_FN_FWD_MUL = OpContract(
    op="mhc_pre_norm_fn_fwd_mul",
    kernel="kernels.mhc.mhc_pre_norm_fn_fwd_mul",
    params=(Param("dtype", F32),),
    args=("x", "fn", "out_mul", "sqrsum"),
    representative={"dtype": "float32"},
    doc=f"""\
The pre-norm projection of v1's ``mhc_pre_norm_fn`` (one RMS group, no split-K): for x ``[n, K]`` bf16 (the m
residual streams of each token, flattened) and the weight fn ``[m3, K]`` fp32 (TF32-rounded by the caller),
writes ``out_mul[t, 0, j] = Σ_k x[t, k] · fn[j, k]`` (``[n, 1, m3]`` fp32) and ``sqrsum[t, 0] = Σ_k x[t, k]²``
(``[n, 1]`` fp32), both preallocated and overwritten; the RMS normalization itself is
``mhc_reduce_partials_and_rmsnorm_fwd`` with n_splits = 1.

out_mul: {_TF32}

sqrsum (not on the tensor cores; it decides its bits exactly): with c the column, token t keeps 4 partial sums
``s_l = __fmaf_rn(x_c, x_c, s_l)`` over the columns c = l, l + 4, l + 8, ... (l = c mod 4) in increasing order
from +0 (each x_c² is exact, so this is a plain fp32 sum of squares), then ``sqrsum = (s_0 + s_2) + (s_1 + s_3)``
(the xor butterfly over the 4 lanes that hold them). The same order on sm_90 and sm_100. NaN and infinities
propagate as IEEE arithmetic gives.

Tiling (none of it changes a result except as stated): a CTA owns {FWD_TOKENS} tokens and all {PAD_ROWS} padded
weight rows (rows m3 .. {PAD_ROWS - 1} are read as zeros by the TMA loads and never written), and walks K in steps
of {FWD_HIDDEN} columns through a {FWD_STAGES}-stage TMA pipeline. Runtime: n, K (a multiple of {FWD_HIDDEN}) and
m3 (1 .. {PAD_ROWS}); nothing is compile-time but the dtype. The peer writes only columns j < 24 (m = 4); here
every j < m3. No launch for n = 0; K = 0 writes zeros.""",
)

MHC_PRE_NORM_FN_BWD_MUL = OpContract(
    op="mhc_pre_norm_fn_bwd_mul",
    kernel="kernels.mhc.mhc_pre_norm_fn_bwd_mul",
    params=(Param("dtype", F32),),
    args=("out_mul_grad", "sqrsum_grad", "x", "fn", "x_grad", "fn_grad"),
    representative={"dtype": "float32"},
    doc=f"""\
Backward of ``mhc_pre_norm_fn_fwd_mul``. Inputs: out_mul_grad ``[n, 1, m3]`` fp32 (TF32-rounded by the caller),
sqrsum_grad ``[n, 1]`` fp32, the forward's x ``[n, K]`` bf16 and fn ``[m3, K]`` fp32. Outputs:

    x_grad[t, k]  = bf16(__fmaf_rn(2·x[t, k], sqrsum_grad[t], float(x_grad[t, k]) + Σ_j out_mul_grad[t, j] · fn[j, k]))
    fn_grad[j, k] = Σ_t out_mul_grad[t, j] · x[t, k]

x_grad ``[n, K]`` bf16 is ACCUMULATED in place (its old value is the GEMM's initial accumulator, then the fma, then
one rounding to bf16, nearest-even), as v1 accumulates the residual's gradient; fn_grad ``[m3, K]`` fp32 is
overwritten. Both sums run on the tensor cores. {_TF32}

Determinism: CTA b owns columns {BWD_HIDDEN}·b .. {BWD_HIDDEN}·b + {BWD_HIDDEN - 1} of every token and walks the
tokens serially in blocks of {BWD_TOKENS}, in token order, accumulating fn_grad in registers; no atomics, so both
outputs are run-to-run bit-identical for a given build and arch, whatever n. Grid K / {BWD_HIDDEN} (not the SM
count: one CTA per column block, as the peer). Runtime: n, K (a multiple of {BWD_HIDDEN}) and m3 (1 ..
{PAD_ROWS}); nothing is compile-time but the dtype. n = 0 writes fn_grad = 0 and leaves x_grad (empty) alone.""",
)

CONTRACTS = (MHC_PRE_NORM_FN_FWD_MUL, MHC_PRE_NORM_FN_BWD_MUL)
