"""Contracts of the mHC mix ops (tile_kernels 2.1 ``mhc``): the head mix, the pre-block's split into pre/post/comb
mixes, the merge of the mix weights with the RMS-norm weight, and the reduction of the pre-norm GEMM's split-K
partials with the RMS normalization, each with its backward.

The specification of each op is its contract's ``doc``; docs/spec/mhc_mixes.md is generated from it. The fused
inference kernel ``mhc_pre_big_fuse_fwd`` must reproduce the forwards' bits exactly, so each doc states the
evaluation order down to the rounding of every step. Notation: n tokens, m = mhc_mult, m3 = m(m+2).
"""
from kernelkiln_contract._core import OpContract, Param

MHC_MULTS = (2, 4, 8)  # m sizes the per-thread register rows and unrolls the loops; DeepSeek-V4 uses 4
SPLIT_BWD_MULTS = (2, 4)  # m = 8: a thread's rows of logits, gradients and 83 accumulators spill past 255 registers
MIX_THREADS = 128  # the mix kernels: one token per thread, 128 tokens per CTA (per step of the persistent loops)
HEAD_BWD_BLOCK_TOKENS = 32  # the head mix backward's token block (the peer's token_block_size default)
SPLIT_BWD_BLOCK_TOKENS = 32  # the split mixes backward's token block, one lane each (the peer's default)
SPLIT_REDUCE_THREADS = 128  # per column of the split-mixes partials: thread tx adds rows tx, tx + 128, ...
MERGE_FWD_THREADS = 128
MERGE_BWD_THREADS = 64  # 256 columns per CTA: enough CTAs for a [24, 4·H] weight to fill the GPU
RMS_THREADS = 128
MERGE_VEC = 4  # fn_normw_merge: columns per thread; cols must be a multiple of it
RMS_VEC = 4  # reduce_partials_and_rmsnorm: m3 must be a multiple of it (m(m+2) is, for even m)
F32 = ("float32",)


def mult3(m):
    return m * (m + 2)


_SIGMOID = ("``sigmoid(z) = __fdiv_rn(1, __fadd_rn(1, expf(-z)))`` (TVM's legalization of T.sigmoid: IEEE division, "
            "CUDA's expf, which is also torch's on the GPU)")

MHC_HEAD_COMPUTE_MIX_FWD = OpContract(
    op="mhc_head_compute_mix_fwd",
    kernel="kernels.mhc.mhc_head_compute_mix_fwd",
    params=(Param("mhc_mult", MHC_MULTS),),
    args=("input_mix", "mhc_scale", "mhc_base", "output_mix", "mhc_pre_eps", "num_tokens"),
    representative={"mhc_mult": 4},
    doc=f"""\
The head's pre mix from its m mix logits: ``output_mix[t, j] = __fadd_rn(sigmoid(__fmaf_rn(input_mix[t, j],
mhc_scale[0], mhc_base[j])), mhc_pre_eps)`` with {_SIGMOID}. Inputs: input_mix ``[n, m]``, mhc_scale ``[1]``,
mhc_base ``[m]``, all fp32; the output ``[n, m]`` fp32 is the caller's (preallocated, overwritten). One fma, one
exp, one add, one division and one add per element: the same bits as the peer's kernel (whose ``x·s + b`` nvcc
contracts to that fma). NaN and infinities propagate as IEEE arithmetic gives (sigmoid(+inf) = 1, sigmoid(-inf) =
0, NaN stays NaN).

Compile time: m (the row held in registers and the vector width). Runtime: n and eps. token_block_size, a tiling
knob of the peer, changes nothing here and is only checked. One thread per token; no launch for n = 0.""",
)

MHC_HEAD_COMPUTE_MIX_BWD = OpContract(
    op="mhc_head_compute_mix_bwd",
    kernel="kernels.mhc.mhc_head_compute_mix_bwd",
    params=(Param("mhc_mult", MHC_MULTS),),
    args=("output_mix_grad", "input_mix", "mhc_scale", "mhc_base", "input_mix_grad", "mhc_scale_grad_partial",
          "mhc_base_grad_partial", "num_tokens", "num_sms"),
    representative={"mhc_mult": 4},
    doc=f"""\
Backward of ``mhc_head_compute_mix_fwd``. Per element: ``p = sigmoid(__fmaf_rn(x, s, b_j))`` recomputed ({_SIGMOID}),
``gz = __fmul_rn(__fmul_rn(p, __fsub_rn(1, p)), go)``, ``input_mix_grad = __fmul_rn(gz, s)``. The scale and base
gradients are left as per-CTA partials for the caller to sum (as the peer): ``mhc_scale_grad_partial [P, 1]`` and
``mhc_base_grad_partial [P, m]`` (P = num_sms rows, all overwritten; a CTA without tokens writes +0).

Partial order (decides the bits), the peer's (its kernel lowered by TileLang 0.1.15, token_block_size 32): CTA pid
takes the 32-token blocks pid, pid + P, pid + 2P, ... in that order; thread tx (of 128) the elements ``e = tx, tx +
128, ...`` (e < 32m) of each block's row-major ``[32, m]`` values, token ``32·block + e // m``, column ``e % m =
tx % m``. Each thread accumulates from +0 over its elements in that order: ``acc_s = __fmaf_rn(gz, x, acc_s)`` and
``acc_b = __fadd_rn(acc_b, gz)``. Then xor butterflies over the CTA's threads, ``v = v + v[tx ^ o]``: for the scale
o = 64, 32, ..., 1 (the total of all threads), for the base o = 64, 32, ..., m (thread j < m holds column j's
total). This is the order of the peer's lowered kernel for m = 2, 4 and 8; at m = 4 the partials were compared
with the peer's on the H200 and are bitwise equal (scripts/diag_mhc_bitwise.py, run 2026-12-04-acd31f2883). For m
= 2 the peer's kernel leaves the scale partial unreduced (thread 0's own sum: a defect of its T.Parallel layout
with 64 elements on 128 threads); ours reduces it (threads 64.. hold +0, which changes no sum).

Compile time: m. Runtime: n, P (the grid; the peer takes it as num_sms and so do we: the partial count is the
caller's). token_block_size is only checked (the bits are the peer's at its default, 32). Launched also for n = 0 (it
writes the zero partials).""",
)

_SPLIT_FWD_DOC = f"""\
The pre-block's three mixes from the m3 = m(m+2) logits of each token. Column j of ``input_mixes [n, m3]`` belongs
to group k = min(2, j // m) and ``z_j = __fmaf_rn(a_j, mhc_scale[k], mhc_base[j])``; then

    pre_layer_mix[t, j]  = __fadd_rn(sigmoid(z_j), mhc_pre_eps)              j = 0 .. m-1
    post_layer_mix[t, j] = __fmul_rn(sigmoid(z_(m+j)), mhc_post_mult_value)    j = 0 .. m-1
    comb_res_mix[t, j]   = z_(2m+j)                                          j = 0 .. m²-1

with {_SIGMOID}. mhc_scale ``[3]``, mhc_base ``[m3]``, all fp32; the outputs ``[n, m]``, ``[n, m]`` and ``[n, m²]``
are the caller's (2-D: views of the peer's ``[..., m, 1]`` / ``[..., m, m]`` shapes flatten to these). Same bits
as the peer's kernel (its ``a·s + b`` contracted to the same fma); mhc_pre_big_fuse_fwd computes post and comb with
exactly these steps. Special values propagate as IEEE arithmetic gives.

Compile time: m. Runtime: n, post_mult, eps. One thread per token (16-byte loads and stores); no launch for n = 0."""

MHC_PRE_SPLIT_MIXES_FWD = OpContract(
    op="mhc_pre_split_mixes_fwd",
    kernel="kernels.mhc.mhc_pre_split_mixes_fwd",
    params=(Param("mhc_mult", MHC_MULTS),),
    args=("input_mixes", "mhc_scale", "mhc_base", "pre_layer_mix", "post_layer_mix", "comb_res_mix",
          "mhc_post_mult_value", "mhc_pre_eps", "num_tokens"),
    representative={"mhc_mult": 4},
    doc=_SPLIT_FWD_DOC,
)

MHC_PRE_SPLIT_MIXES_BWD = OpContract(
    op="mhc_pre_split_mixes_bwd",
    kernel="kernels.mhc.mhc_pre_split_mixes_bwd",
    params=(Param("mhc_mult", SPLIT_BWD_MULTS),),
    args=("pre_layer_mix_grad", "post_layer_mix_grad", "comb_res_mix_grad", "input_mixes", "post_layer_mix",
          "mhc_scale", "mhc_base", "input_mixes_grad", "mhc_scale_grad_partial", "mhc_base_grad_partial",
          "mhc_post_mult_value", "num_tokens", "num_partials"),
    representative={"mhc_mult": 4},
    doc=f"""\
Backward of ``mhc_pre_split_mixes_fwd``, first of two kernels (the second, ``mhc_pre_split_mixes_reduce``, sums
the partials). The logit gradient g_j of each column: pre columns ``p = sigmoid(__fmaf_rn(a_j, s_0, b_j))``
recomputed ({_SIGMOID}), ``g = __fmul_rn(__fmul_rn(gp, p), __fsub_rn(1, p))``; post columns from the forward's
saved output q (the peer's choice: not recomputed), ``g = __fmul_rn(__fmul_rn(gq, q), __fsub_rn(1, __fdiv_rn(q,
post_mult)))``; comb columns ``g = gc``. Then ``input_mixes_grad[t, j] = __fmul_rn(g_j, mhc_scale[k])`` (k = min(2,
j // m)), and per CTA the partials ``base[j] = Σ g_j`` and ``scale[k] = Σ g_j·a_j`` over its tokens.

Partial order (decides the bits), the peer's (its kernel lowered by TileLang 0.1.15, token_block_size 32): P CTAs
(P = the SM count at run time, config.get_num_sms(), as the peer); CTA pid takes the 32-token blocks pid, pid + P,
... in order, lane l of its one warp token ``32·block + l``; a lane past the last token computes on a row of zeros
(the peer's padded loads: its g is +0 unless mhc_base holds a NaN). Per block and column j: ``v = __fadd_rn(+0,
g_j)`` of every lane, a warp xor butterfly ``v + shfl_xor(v, o)`` (o = 16, 8, 4, 2, 1), then ``base[j] =
__fadd_rn(base[j], v)`` from +0 over the blocks. Per lane, in column order over its tokens, ``scale[k] =
__fmaf_rn(g_j, a_j, scale[k])`` from +0, and at the end the same butterfly. Partial rows ``[P, 3]`` and ``[P, m3]``
live in a scratch buffer the op allocates. Deterministic for a given P; at m = 4 the gradients (after
``mhc_pre_split_mixes_reduce``) were compared with the peer's on the H200 and are bitwise equal
(scripts/diag_mhc_bitwise.py, run 2026-12-04-acd31f2883).

Compile time: m (2 or 4: for m = 8 a thread's row of 80 logits, 80 gradients and 83 accumulators does not fit
in registers). Runtime: n, P, post_mult. Launched also for n = 0 (zero partials, so the gradients are +0).""",
)

MHC_PRE_SPLIT_MIXES_REDUCE = OpContract(
    op="mhc_pre_split_mixes_reduce",
    kernel="kernels.mhc.mhc_pre_split_mixes_reduce",
    params=(Param("dtype", F32),),
    args=("mhc_scale_grad_partial", "mhc_base_grad_partial", "mhc_scale_grad", "mhc_base_grad", "num_partials",
          "mhc_mult3"),
    representative={"dtype": "float32"},
    doc="""\
Second kernel of ``mhc_pre_split_mixes_bwd``, the peer's reduce kernel: one CTA of 128 threads per column of the
concatenated ``[base (m3) | scale (3)]`` partials; thread tx adds the rows tx, tx + 128, tx + 256, ... to +0 in that
order (``__fadd_rn``), then a xor butterfly over the CTA, ``v + v[tx ^ o]`` for o = 64, 32, ..., 1; the outputs
``[m3]`` and ``[3]`` are overwritten. Runtime: P and m3.""",
)

MHC_FN_NORMW_MERGE_FWD = OpContract(
    op="mhc_fn_normw_merge_fwd",
    kernel="kernels.mhc.mhc_fn_normw_merge_fwd",
    params=(Param("dtype", F32),),
    args=("fn", "normw", "out_fn", "num_rows", "num_col_vecs"),
    representative={"dtype": "float32"},
    doc="""\
The mix weights with the RMS-norm weight folded in: ``out_fn[r, c] = __fmul_rn(fn[r, c], normw[c])`` for fn
``[rows, cols]`` and normw ``[cols]`` fp32 (in mHC ``[m3, m·H]``; any 2-D shape with cols a multiple of 4). One
rounding per element: bit-identical to the peer's kernel and to ``fn * normw`` in torch, special values included.
Runtime: rows and cols; no launch when either is 0.""",
)

MHC_FN_NORMW_MERGE_BWD = OpContract(
    op="mhc_fn_normw_merge_bwd",
    kernel="kernels.mhc.mhc_fn_normw_merge_bwd",
    params=(Param("dtype", F32),),
    args=("fn", "normw", "out_fn_grad", "fn_grad", "normw_grad", "num_rows", "num_col_vecs"),
    representative={"dtype": "float32"},
    doc="""\
Backward of ``mhc_fn_normw_merge_fwd``, accumulated in place (as the peer): ``fn_grad[r, c] =
__fmaf_rn(out_fn_grad[r, c], normw[c], fn_grad[r, c])``, and per column ``acc = __fmaf_rn(out_fn_grad[r, c],
fn[r, c], acc)`` over the rows r = 0, 1, ... in order from +0, then ``normw_grad[c] = __fadd_rn(normw_grad[c],
acc)``. That is the peer's order (its ``+=`` contracted to the same fmas), so the results are the same bits.
Runtime: rows and cols (a multiple of 4); no launch for cols = 0 (rows = 0 still adds +0 into normw_grad).""",
)

MHC_REDUCE_PARTIALS_AND_RMSNORM_FWD = OpContract(
    op="mhc_reduce_partials_and_rmsnorm_fwd",
    kernel="kernels.mhc.mhc_reduce_partials_and_rmsnorm_fwd",
    params=(Param("dtype", F32),),
    args=("out_mul_splitted", "sqrsum_splitted", "out_mul", "sqrsum", "out", "num_tokens", "n_rms_group",
          "num_col_vecs", "rms_group_size", "rms_eps", "n_splits"),
    representative={"dtype": "float32"},
    doc="""\
Finishes the pre-norm GEMM that a split-K GEMM (DeepGEMM, or ``mhc_pre_norm_fn_partials_ref``) left in S partials:
inputs ``out_mul_splitted [S, n, G, m3]`` and ``sqrsum_splitted [S, n, G]`` fp32; outputs (the caller's,
overwritten) ``out_mul [n, G, m3]``, ``sqrsum [n, G]`` and ``out [n, m3]``. Per token t and RMS group g:

    sq      = ((+0 + sqrsum_splitted[0]) + sqrsum_splitted[1]) + ... + sqrsum_splitted[S-1]    (__fadd_rn)
    om_j    = ((+0 + out_mul_splitted[0, j]) + ...) + out_mul_splitted[S-1, j]                (__fadd_rn)
    r_g     = rsqrtf(__fadd_rn(__fdiv_rn(sq, float(rms_group_size)), rms_eps))
    out_j   = __fmul_rn(om_j(g=0), r_0), then out_j = __fmaf_rn(om_j(g), r_g, out_j) for g = 1 .. G-1

Splits in order from split 0, groups in order from group 0: the peer's order (it starts its fma chain over groups
from +0, which differs from the first plain product only in the sign of a zero). rsqrtf is CUDA's approximate
reciprocal square root (torch's on the GPU too). mhc_pre_big_fuse_fwd (G = 1) reproduces these steps exactly.
n_splits must equal S. Runtime: n, G, m3 (a multiple of 4), the group size, eps and S; no launch for n = 0.""",
)

MHC_REDUCE_PARTIALS_AND_RMSNORM_BWD = OpContract(
    op="mhc_reduce_partials_and_rmsnorm_bwd",
    kernel="kernels.mhc.mhc_reduce_partials_and_rmsnorm_bwd",
    params=(Param("dtype", F32),),
    args=("out_grad", "out_mul", "sqrsum", "out_mul_grad", "sqrsum_grad", "num_rows", "n_rms_group",
          "num_col_vecs", "rms_group_size", "rms_eps", "rms_eps_group"),
    representative={"dtype": "float32"},
    doc="""\
Backward of ``mhc_reduce_partials_and_rmsnorm_fwd`` with respect to the summed ``out_mul [n, G, m3]`` and ``sqrsum
[n, G]`` (the split partials' gradients are these, broadcast; the caller expands them). Per (t, g), with ``r =
rsqrtf(__fadd_rn(__fdiv_rn(sq, float(gs)), eps))`` recomputed as in the forward:

    out_mul_grad[t, g, j] = __fmul_rn(out_grad[t, j], r)
    d                     = Σ_j out_grad[t, j] · out_mul[t, g, j]     (the 32-lane order below)
    sqrsum_grad[t, g]     = __fdiv_rn(__fdiv_rn(__fmul_rn(d, r), __fadd_rn(sq, c)), -2)

where c = fp32(eps · gs) with the product taken in float64 (the peer's compile-time constant is computed that
way). d: lane l of 32 accumulates ``acc = __fmaf_rn(og_j, om_j, acc)`` from +0 over j = l, l + 32, .., then the
lanes are added by the xor butterfly ``acc + shfl_xor(acc, o)``, o = 16, 8, 4, 2, 1: the order of the peer's
lowered kernel (one column per lane of its 32-thread CTA, contracted to an fma from +0, then its
``tl::AllReduce<Sum, 32>``), so for m3 <= 32 (m <= 4) every output is the peer's bits; for larger m3 the peer's
layout was not read. Outputs are the caller's, overwritten. One warp per (t, g). Runtime: n, G, m3 (a multiple
of 4), the group size and eps; no launch for n = 0.""",
)

CONTRACTS = (MHC_HEAD_COMPUTE_MIX_FWD, MHC_HEAD_COMPUTE_MIX_BWD, MHC_PRE_SPLIT_MIXES_FWD, MHC_PRE_SPLIT_MIXES_BWD,
             MHC_PRE_SPLIT_MIXES_REDUCE, MHC_FN_NORMW_MERGE_FWD, MHC_FN_NORMW_MERGE_BWD,
             MHC_REDUCE_PARTIALS_AND_RMSNORM_FWD, MHC_REDUCE_PARTIALS_AND_RMSNORM_BWD)
