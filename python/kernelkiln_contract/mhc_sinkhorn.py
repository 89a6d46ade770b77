"""Contracts of the mHC Sinkhorn normalization (forward, backward) and the fused inference pre-block (tile_kernels
2.1 ``mhc_sinkhorn_fwd`` / ``mhc_sinkhorn_bwd`` / ``mhc_pre_big_fuse_fwd``).

The specification of each op is its contract's ``doc``; docs/spec/ is generated from it. The launch geometry the
runtime and the tests share is here too.
"""
from kernelkiln_contract._core import OpContract, Param

SINKHORN_MULTS = (4,)  # m: the shuffle-group width m² and the unrolled sums; DeepSeek-V4's value
SINKHORN_THREADS = 128  # one matrix element per lane: 128 / m² tokens per CTA
SINKHORN_BWD_SLOTS = 40  # states per lane in the backward's shared-memory ring (2·repeat for repeat <= 20)
BIG_FUSE_APPLY_WARPS = 2  # warps of the fused pre-block that apply the mix (warp 0 does the mixes)
BIG_FUSE_VEC = 8  # bf16 elements per 16-byte vector: H must be a multiple of it
BIG_FUSE_UNROLL = 2  # vectors per apply lane whose loads are issued before their sums


def sinkhorn_tokens_per_block(mhc_mult):
    return SINKHORN_THREADS // (mhc_mult * mhc_mult)


_SINKHORN_STEPS = """\
Per token, with all arithmetic fp32 and IEEE (``__fdiv_rn``, ``__fadd_rn``; nothing contracted):

    e = expf(x - max_k x[j, k])                 (max over the row; its order cannot change it)
    X = e / (Σ_k e[j, k]) + eps                 (row sum)
    X = X / (Σ_j X[j, k] + eps)                 (column sum)
    repeat - 1 times:  X = X / (Σ_k X[j, k] + eps);  X = X / (Σ_j X[j, k] + eps)

Every sum is the xor butterfly of TileLang's ``tl::AllReduce``, as the peer's kernel lowers its ``T.reduce_sum``
(one element per thread): each term starts as ``0 + v``, then the first half of the terms is added to the second
half until one is left: ``((0 + v_0) + (0 + v_2)) + ((0 + v_1) + (0 + v_3))`` for m = 4 (m a power of two).
"""

MHC_SINKHORN_FWD = OpContract(
    op="mhc_sinkhorn_fwd",
    kernel="kernels.mhc.mhc_sinkhorn_fwd",
    params=(Param("mhc_mult", SINKHORN_MULTS),),
    args=("comb_res_mix", "comb_res_mix_out", "num_tokens", "repeat", "eps"),
    representative={"mhc_mult": 4},
    doc=f"""\
Sinkhorn–Knopp normalization of the mHC residual-mixing logits towards a doubly stochastic matrix:
``comb_res_mix [n, m, m]`` fp32 in, ``comb_res_mix_out [n, m, m]`` fp32 out (preallocated; it may be the input
itself), returns None.

{_SINKHORN_STEPS}
This is the peer's formula (its torch reference ``x.softmax(-1) + eps`` then alternating column/row divisions) in
the order of the peer's kernel (read from its lowered source at token_block_size 8, m 4: one element per thread,
so SM100's two-wide packed reduction does not apply and sm_100a's bits equal sm_90a's). On the GPU
``mhc_sinkhorn_fwd_ref`` of kernelkiln.torch, evaluated on CUDA tensors, is bit-identical (torch's CUDA exp is
expf). Special values propagate as the formulas do: a NaN or
+inf anywhere in a token's matrix makes the whole matrix NaN (the column sums carry it to every column), a row of
-inf gives a NaN row, and so the whole matrix.

Layout: one element per lane, a token's m² lanes form a shuffle group (128 / m² tokens per 128-thread CTA); the
sums are ``__shfl_xor_sync`` butterflies inside the group (every lane ends with its row's or column's sum). Compile
time: m (the group width and the unrolled sums; 4, DeepSeek-V4's). Runtime: n, repeat (>= 1: the loop count) and
eps. No launch for n = 0. mhc_pre_big_fuse_fwd runs these exact steps, which keeps it bit-identical to the
unfused chain.""",
)

MHC_SINKHORN_BWD = OpContract(
    op="mhc_sinkhorn_bwd",
    kernel="kernels.mhc.mhc_sinkhorn_bwd",
    params=(Param("mhc_mult", SINKHORN_MULTS),),
    args=("grad_output", "x", "grad_input", "num_tokens", "repeat", "eps"),
    representative={"mhc_mult": 4},
    doc=f"""\
The gradient of mhc_sinkhorn_fwd with respect to its input logits: ``grad_output``, ``x`` (the forward's input,
not its output) and the preallocated ``grad_input``, all ``[n, m, m]`` fp32 (grad_input may be grad_output
itself); returns None.

The forward is recomputed from x in exactly mhc_sinkhorn_fwd's order, keeping its 2·repeat states: S_0 = the
softmax ``e / Σ_k e``, S_1 = S_0 + eps, then the input of each column and row division in turn (S_h for odd h
enters a column division, for even h >= 2 a row division). Backward from g = grad_output, for h = 2·repeat-1
down to 1, with u = S_h and s its sum along the step's axis (the butterfly order above, recomputed from u):

    t = Σ (g·u) / (s + eps)        (products rounded, then summed in the same order)
    g = (g - t) / (s + eps)

the eps step passes g through, and the softmax gives ``grad_input = (g - Σ_k g·S_0) · S_0``. The formulas are the
peer's; it keeps the states and sums in shared memory sized by its compile-time repeat. Here repeat is a runtime
value: each lane keeps up to {SINKHORN_BWD_SLOTS} states in a shared-memory ring (20 KB per CTA), enough for
repeat <= {SINKHORN_BWD_SLOTS // 2} in one pass; above that the states are taken in segments from the end and the
forward is recomputed from x for each segment (bit-identical states, so the result does not depend on the ring
size; the cost grows with ceil(2·repeat / {SINKHORN_BWD_SLOTS}) forward passes). Sums are recomputed from the
stored states rather than stored.

Agrees with autograd through the peer's ``sinkhorn_normalize_ref`` to rounding; bit-identical to
``mhc_sinkhorn_bwd_ref`` evaluated on CUDA tensors. Compile time: m. Runtime: n, repeat (>= 1), eps. No launch
for n = 0.""",
)

MHC_PRE_BIG_FUSE_FWD = OpContract(
    op="mhc_pre_big_fuse_fwd",
    kernel="kernels.mhc.mhc_pre_big_fuse_fwd",
    params=(Param("mhc_mult", SINKHORN_MULTS),),
    args=("gemm_out_mul", "gemm_out_sqrsum", "mhc_scale", "mhc_base", "residual", "post_mix", "comb_mix",
          "layer_input", "num_tokens", "hidden_size", "n_splits", "rms_eps", "mhc_pre_eps", "mhc_sinkhorn_eps",
          "mhc_post_mult_value", "sinkhorn_repeat"),
    representative={"mhc_mult": 4},
    doc=f"""\
The mHC pre-block for inference in one kernel, from the split-K partials of the norm GEMM: ``gemm_out_mul [S, n,
m3]`` and ``gemm_out_sqrsum [S, n]`` fp32 (m3 = m(m+2), S = n_splits), ``mhc_scale [3]``, ``mhc_base [m3]`` fp32
and ``residual [n, m, H]`` bf16 in; the preallocated ``post_mix [n, m]``, ``comb_mix [n, m²]`` fp32 and
``layer_input [n, H]`` bf16 out (the pre mix is not written); returns None. Per token:

    sq = ((0 + sqrsum_0) + sqrsum_1) + ... ;   a_l = ((0 + mul_0[l]) + mul_1[l]) + ...   (split 0 first)
    r = rsqrtf(sq / (m·H) + rms_eps)          (the RMS over the whole m·H row: one group)
    z_l = fma(a_l · r, scale[min(2, l // m)], base[l])
    pre_i = 1 / (1 + expf(-z_i)) + pre_eps,   post_i = (1 / (1 + expf(-z_{{m+i}}))) · post_mult,
    comb = Sinkhorn(z[2m:] as m×m, sinkhorn_repeat, sinkhorn_eps)   (mhc_sinkhorn_fwd's steps)
    layer_input = bf16(fma(pre_{{m-1}}, x_{{m-1}}, ... fma(pre_1, x_1, pre_0 · x_0)))   (streams in order)

{_SINKHORN_STEPS}
Bit-identical (``torch.equal``) to the unfused chain of this package's ops: mhc_reduce_partials_and_rmsnorm_fwd
with one group of m·H, mhc_pre_split_mixes_fwd, mhc_sinkhorn_fwd and mhc_pre_apply_mix_fwd (each computes the same
scalar expression in the same order; a signed zero in the normalized mixes, where the chain's ``fma(a, r, +0)``
and this ``a·r`` can differ, never reaches an output). The peer's fused kernel lowers its Sinkhorn sums to the
same butterflies (one element per lane of warp 0), so the comb mix follows the peer's order too.

Layout: one CTA per token; warp 0 computes the mixes and the Sinkhorn steps, {BIG_FUSE_APPLY_WARPS} more warps
apply the pre mix in {BIG_FUSE_VEC}-element vectors. Compile time: m (m3 and m² <= 32 lanes of warp 0; 4, DeepSeek-V4's).
Runtime: n, H (any positive multiple of {BIG_FUSE_VEC}), n_splits (= S), the eps values, post_mult and
sinkhorn_repeat (>= 1). No launch for n = 0.""",
)

CONTRACTS = (MHC_SINKHORN_FWD, MHC_SINKHORN_BWD, MHC_PRE_BIG_FUSE_FWD)
