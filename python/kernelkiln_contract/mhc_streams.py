"""Contracts of the mHC stream ops: expanding the hidden state into m residual streams and back, applying the pre
mix (m streams -> the layer input), the post mix (layer output + m streams -> m new streams), their backwards, and
the multi-layer recompute of the pre/post chain.

The specification of each op is its contract's ``doc``; docs/spec/mhc_streams.md is generated from it.
"""
from kernelkiln_contract._core import OpContract, Param

MHC_MULTS = (2, 4, 8)  # streams: register arrays and unrolled loops are sized by it
STREAM_VEC = 8  # bf16 elements per thread and access (16 bytes): H must be a multiple of it
STREAM_THREADS = 128  # threads per CTA of the stream kernels (the reductions' order depends on it)
POST_BWD_THREADS = 64  # mhc_post_bwd's CTA: the peer's, so that its reduction over H has the peer's order

_M = Param("mhc_mult", MHC_MULTS)
_REP = {"mhc_mult": 4}

_ELEMENTWISE = f"""\
One thread per token and group of {STREAM_VEC} consecutive columns ({STREAM_THREADS} threads per CTA, 16-byte
accesses), so H (a runtime argument) must be a multiple of {STREAM_VEC}; n·H/{STREAM_VEC} must fit in int32. Token
count and H are runtime arguments; m (the stream count) is compile-time because it sizes the per-thread register
arrays and the unrolled stream loops. No launch for n = 0."""

def _per_token(threads, peer_block):
    return f"""\
One CTA of {threads} threads per token. Thread t owns the column groups g = k·{threads} + t (k = 0, 1, ...) of
{STREAM_VEC} columns each and accumulates its partial sums serially with one fma per term, in (k, column) order,
starting from +0. The partials are then combined over all {threads} threads by the xor butterfly of TileLang's
``tl::AllReduce`` (``a + partner``, offsets {threads // 2}, .., 2, 1, largest first: offsets >= 32 through shared
memory, the rest by ``shfl_xor``), so the total is the tree that adds the upper half of the partials to the lower
half until one is left. That order is a function of H only (not of the GPU or the SM count), so the CPU reference
reproduces it bit for bit. It is the peer's order: its kernel ({threads} threads, blocks of {peer_block} columns,
{STREAM_VEC} per thread) lowers its reducer to the same per-thread fma chain and the same butterfly, so for H a
multiple of {threads * STREAM_VEC} the results are bit-identical to the peer's (for other H its block, hence its
layout, changes, and the two agree to rounding). H is a runtime argument (a multiple of {STREAM_VEC}); m is
compile-time."""


EXPAND_TO_MHC_FWD = OpContract(
    op="expand_to_mhc_fwd",
    kernel="kernels.mhc.expand_to_mhc_fwd",
    params=(_M,),
    args=("x", "o", "num_vecs", "hidden_vecs"),
    representative=_REP,
    doc=f"""\
Copies the hidden state into each of the m residual streams: ``o[t, s, :] = x[t, :]`` for s = 0 .. m-1, x ``[n, H]``
bf16 into the preallocated o ``[n, m, H]`` bf16 (as tile_kernels 2.1 ``mhc.expand_to_mhc_fwd``). A copy: exact,
special values included.

{_ELEMENTWISE}""",
)

EXPAND_TO_MHC_BWD = OpContract(
    op="expand_to_mhc_bwd",
    kernel="kernels.mhc.expand_to_mhc_bwd",
    params=(_M,),
    args=("o_grad", "x_grad", "num_vecs", "hidden_vecs"),
    representative=_REP,
    doc=f"""\
The backward of the expansion: ``x_grad[t, h] = bf16(((0 + g_0) + g_1) + ... + g_(m-1))`` with ``g_s =
float(o_grad[t, s, h])``, fp32 additions in stream order starting from +0 (so an all-(-0) column gives +0, as the
peer's zero-filled accumulator does), one rounding to bf16 (nearest-even) at the end. o_grad ``[n, m, H]`` bf16,
x_grad ``[n, H]`` bf16 preallocated and overwritten.

{_ELEMENTWISE}""",
)

MHC_PRE_APPLY_MIX_FWD = OpContract(
    op="mhc_pre_apply_mix_fwd",
    kernel="kernels.mhc.mhc_pre_apply_mix_fwd",
    params=(_M,),
    args=("x", "mix", "o", "num_vecs", "hidden_vecs"),
    representative=_REP,
    doc=f"""\
The pre mix: the layer input is the mix-weighted sum of the m streams, ``o[t, h] = bf16(fma(m_(m-1), x_(m-1),
... fma(m_2, x_2, fma(m_1, x_1, m_0 · x_0))))`` with ``m_s = mix[t, s]`` (fp32) and ``x_s = float(x[t, s, h])``:
a rounded product for stream 0, then one fma per stream in stream order, one rounding to bf16 (nearest-even). x
``[n, m, H]`` bf16, mix ``[n, m]`` fp32 (a ``[.., m, 1]`` mix is viewed flat by the caller), o ``[n, H]`` bf16
preallocated. The same formula (and so the same bits) is used by ``mhc_multilayer_recompute`` and
``mhc_pre_big_fuse_fwd``. It differs from the peer only in the sign of an exact zero: the peer starts from +0
(``0 + m_0·x_0``), so a column whose every product is -0 gives +0 there and -0 here.

{_ELEMENTWISE}""",
)

MHC_PRE_APPLY_MIX_BWD = OpContract(
    op="mhc_pre_apply_mix_bwd",
    kernel="kernels.mhc.mhc_pre_apply_mix_bwd",
    params=(_M,),
    args=("o_grad", "x", "mix", "x_grad", "mix_grad", "num_tokens", "hidden_vecs"),
    representative=_REP,
    doc=f"""\
The backward of the pre mix. The streams' gradient is ACCUMULATED in place (bf16 read-modify-write):
``x_grad[t, s, h] = bf16(fma(mix[t, s], float(o_grad[t, h]), float(x_grad[t, s, h])))``, one rounding. The mix
gradient is a new ``[n, m]`` fp32 tensor: ``mix_grad[t, s] = Σ_h o_grad[t, h] · x[t, s, h]`` (fp32, fma per
term) in the fixed order below. o_grad ``[n, H]`` bf16, x and x_grad ``[n, m, H]`` bf16, mix ``[n, m]`` fp32.

{_per_token(STREAM_THREADS, "gcd(1024, H)")}""",
)

MHC_POST_FWD = OpContract(
    op="mhc_post_fwd",
    kernel="kernels.mhc.mhc_post_fwd",
    params=(_M,),
    args=("x", "residual", "post_layer_mix", "comb_res_mix", "out", "num_vecs", "hidden_vecs"),
    representative=_REP,
    doc=f"""\
The post mix: the m new residual streams from the layer output and the old streams, ``out[t, o, h] = bf16(c_o ·
x_h + Σ_i comb[t, i, o] · r_i)`` with ``c_o = post_layer_mix[t, o]``, ``x_h = float(x[t, h])``, ``r_i =
float(residual[t, i, h])``, evaluated as ``acc = comb[t, 0, o] · r_0`` (a rounded product), ``acc = fma(c_o, x_h,
acc)``, then ``acc = fma(comb[t, i, o], r_i, acc)`` for i = 1 .. m-1, one rounding to bf16 (nearest-even): nvcc's
contraction of the peer's ``c·x + Σ comb·r``, read off its outputs (scripts/diag_mhc_post.py on the H200). x
``[B, S, H]`` bf16, residual ``[B, S, m, H]`` bf16, post_layer_mix ``[B, S, m, 1]`` fp32, comb_res_mix ``[B, S,
m, m]`` fp32 (row i = source stream); out ``[B, S, m, H]`` bf16 (new unless given). This is the peer's order exactly (bitwise).
``mhc_multilayer_recompute`` uses the same formula.

{_ELEMENTWISE}""",
)

MHC_POST_BWD = OpContract(
    op="mhc_post_bwd",
    kernel="kernels.mhc.mhc_post_bwd",
    params=(_M,),
    args=("d_o", "comb_res_mix", "residual", "post_layer_mix", "x", "d_x", "d_residual", "d_post_layer_mix",
          "d_comb_res_mix", "num_tokens", "hidden_vecs"),
    representative=_REP,
    doc=f"""\
The backward of the post mix, with g_o = float(d_o[t, o, h]): ``d_residual[t, i, h] = bf16(Σ_o comb[t, i, o] ·
g_o)`` and ``d_x[t, h] = bf16(Σ_o post[t, o] · g_o)``, each an fma chain over o = 0 .. m-1 starting from +0 (the
peer's order: bitwise), and the fp32 reductions over the hidden dimension ``d_comb_res_mix[t, i, o] = Σ_h r_i ·
g_o`` and ``d_post_layer_mix[t, o] = Σ_h x_h · g_o`` (fma per term) in the fixed order below. All four outputs are
new and shaped like x, residual, post_layer_mix and comb_res_mix. The peer hard-codes m = 4; here m is a
compile-time parameter.

{_per_token(POST_BWD_THREADS, "gcd(512, H)")}""",
)

MHC_MULTILAYER_RECOMPUTE = OpContract(
    op="mhc_multilayer_recompute",
    kernel="kernels.mhc.mhc_multilayer_recompute",
    params=(_M,),
    args=("initial_residual", "ptr_table", "num_vecs", "hidden_vecs", "num_layers", "num_post"),
    representative=_REP,
    doc=f"""\
Recomputes the pre/post chain of L layers from the first residual, for activation recompute: with ``r =
initial_residual`` ``[n, m, H]`` bf16, for layer l = 0 .. L_post-1: ``layer_input[l] = apply_mix(r, pre_mix[l])``
and ``residual[l] = post(layer_output[l], r, post_mix[l], comb_mix[l])``, then r = residual[l] (rounded to bf16,
as stored); if L_post = L - 1 the last layer's input ``layer_input[L-1] = apply_mix(r, pre_mix[L-1])`` follows.
apply_mix and post are exactly the formulas of ``mhc_pre_apply_mix_fwd`` and ``mhc_post_fwd``, so the outputs are
bit-identical to that chain of calls. Each list holds separate contiguous tensors (pre/post mixes n·m fp32, comb
n·m·m fp32, layer input/output n·H bf16, residuals n·m·H bf16).

L and L_post are runtime arguments: the tensors' addresses go to the kernel as one int64 table in device memory
(copied per call from pinned host memory without a synchronization, as the peer does), laid out as the pre mixes
(L), layer inputs (L), layer outputs (L_post), post mixes (L_post), comb mixes (L_post), residuals (L_post). The
running residual stays in registers across the layers.

{_ELEMENTWISE}""",
)

CONTRACTS = (EXPAND_TO_MHC_FWD, EXPAND_TO_MHC_BWD, MHC_PRE_APPLY_MIX_FWD, MHC_PRE_APPLY_MIX_BWD, MHC_POST_FWD,
             MHC_POST_BWD, MHC_MULTILAYER_RECOMPUTE)
