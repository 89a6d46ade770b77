"""Contracts of the Engram gate forward and backward (tile_kernels 2.1 ``engram_gate_fwd`` / ``engram_gate_bwd``).

The specification of each op is its contract's ``doc``; docs/spec/ is generated from it. The launch geometry the
runtime derives from the device (persistent-block counts) is here too, as plain functions, so the build's checks,
the ops and the tests share them.
"""
from kernelkiln_contract._core import OpContract, Param

GATE_FWD_HC = (1, 2, 4, 8)  # the forward's code depends on hc only through strides and the grid
GATE_BWD_HC = (4,)  # the backward's G keeps the peer's layout, two warps per head on eight warps: hc 4 only
GATE_ALIGN = 256  # hidden sizes are multiples of it: one 8-element vector per lane of a warp
GATE_MIN_HIDDEN = 512
GATE_FWD_THREADS = 32
# 256-element groups per pipeline block (one ring slot: 1024 elements) and ring slots (k blocks in pass 1, then v
# blocks in pass 2, SLOTS - 1 blocks ahead): with interleaved tokens 1024-element blocks in 3 slots (15 CTAs per SM)
# beat 512 in 4 (17 CTAs) at H 2560 and 7168 and tie at 4096 (benchmarks/results/TARGETS.md, issue 16)
GATE_FWD_BLOCK_GROUPS = 4
GATE_FWD_RING_SLOTS = 3
# groups of the x row staged in shared memory (H <= 4096); x beyond is read twice. Fewer staged groups buy CTAs per
# SM, which is worth more than staging all of H 7168 (the A/B: benchmarks/results/2026-12-02-62cb392d9e/)
GATE_FWD_STAGED_GROUPS = 16
GATE_FWD_SHARED_BYTES = 2 * 256 * (GATE_FWD_STAGED_GROUPS + GATE_FWD_RING_SLOTS * GATE_FWD_BLOCK_GROUPS)  # 14336
# CTAs an SM holds, from shared memory: sm_90a and sm_100a have 228 KB per SM and reserve 1 KB per CTA; their 64 K
# registers allow 15 one-warp CTAs up to 136 registers a thread, which the kernel's launch bounds enforce
GATE_FWD_CTAS_PER_SM = (228 * 1024) // (GATE_FWD_SHARED_BYTES + 1024)  # 15
GATE_BWD_THREADS = 256  # two warps per head (hc 4): the peer's lane order for G
GATE_BWD_REG_GROUPS = 32  # 256-element groups of a head whose weight-gradient sums a thread keeps in registers
GATE_BWD_TILE_GROUPS = 4  # groups of x, k and w per tile
GATE_BWD_TILE_SLOTS = 3  # tile slots in shared memory: SLOTS - 1 tiles in flight ahead of the one computed
# groups of a token's grad_out rows (all heads) and of its v row staged in shared memory (H <= 8192 whole); with the
# x/k/w tile slots 176 KB (over the 99 KB of consumer Blackwell, within sm_90a's and sm_100a's 227 KB). Groups
# beyond are read from global memory, their weight-gradient sums accumulate in grad_w_partial; same order, same bits.
GATE_BWD_STAGED_GROUPS = 32
GATE_BWD_SHARED_BYTES = ((GATE_BWD_HC[0] + 1) * GATE_BWD_STAGED_GROUPS * 256 * 2
                         + GATE_BWD_TILE_SLOTS * GATE_BWD_HC[0] * GATE_BWD_TILE_GROUPS * 256 * (2 + 2 + 4)
                         + 4 * 2 * GATE_BWD_HC[0] * 2)  # 180288


def gate_fwd_num_blocks(num_sms, hc_mult):
    """Persistent CTAs per head of the forward (the grid is [hc, P]; GATE_FWD_CTAS_PER_SM per SM, which the shared
    memory allows); CTA b takes the tokens b, b + P, b + 2P, .... The result does not depend on it."""
    return max(1, num_sms * GATE_FWD_CTAS_PER_SM // hc_mult)


_GATE_FWD_DOC = """\
Engram gate forward, per token t and head h (x = hidden_states[t, h], k = kv[t, h], v = kv[t, hc], w =
weight_fused[h]; bf16 inputs widened to fp32, fp32 weight):

    sx = Σ x²,  sk = Σ k²,  raw = Σ (x·w)·k
    rx = rsqrtf(sx / H + eps),  rk = rsqrtf(sk / H + eps)
    d  = ((raw · rx) · rk) · s,   s = fp32(H^-1/2)
    g  = sigmoid(copysign(sqrtf(clamp(|d|, clamp_value, +inf)), d)) = 1 / (1 + expf(-y))
    out[t, h] = bf16(fma(g, v, x))

and, with save_for_backward, ``dot = raw`` (unnormalized), ``gate_score = g``, ``rstd_x = rx``, ``rstd_k = rk``
(fp32 [T, hc]). Inputs: hidden_states [T, hc, H] bf16, kv [T, hc+1, H] bf16 (rows 0..hc-1 keys, row hc the value
shared by the heads), weight_fused [hc, H] fp32 (``fused_weight``), optional image_token_mask [T] bool.

Evaluation order (decides the bits; the peer's): one warp per (head, token); lane l owns the elements
{c·256 + 8l + j : c = 0 .. H/256-1, j = 0..7} and accumulates each sum serially, c-major then j, one fma per element
(``acc = fma(x·w, k, acc)``: x·w is exact, bf16 times a product of two bf16; ``fma(x, x, acc)`` for the squares);
then a xor butterfly over offsets 16, 8, 4, 2, 1 (every lane ends with the same sum). The division by H and the
square root are IEEE; rsqrtf and expf are CUDA's (so is torch's on the GPU). d = 0 gives g = sigmoid(+sqrt(clamp))
(copysign of +0), where the peer's torch reference's sign() gives 0.5.

Image tokens (mask True): the output row is the input row (copied; nothing to do in place) and the four saved rows
are not written. ``inplace`` writes the output into hidden_states (then save_for_backward must be False: backward
reads the input). No launch for T = 0.

Compile time: hc (the grid and strides; offered 1, 2, 4, 8), save_for_backward (the four stores), whether a mask is
given (the per-token test) and inplace (the image-row copy). Runtime: T, H (any multiple of 256 from 512), eps,
clamp_value, s (computed from H on the host, rounded once to fp32 as the peer's compile-time constant is) and the
persistent-CTA count P (grid [hc, P], CTA b takes the tokens b, b + P, ...): results do not depend on P.
"""

ENGRAM_GATE_FWD = OpContract(
    op="engram_gate_fwd",
    kernel="kernels.engram.engram_gate_fwd",
    params=(
        Param("hc_mult", GATE_FWD_HC),
        Param("save_for_backward", (False, True)),
        Param("has_image_token_mask", (False, True)),
        Param("inplace", (False, True)),
    ),
    args=("hidden_states", "kv", "weight_fused", "image_token_mask", "output", "dot_out", "gate_score", "rstd_x",
          "rstd_k", "num_tokens", "num_groups", "eps", "clamp_value", "scalar", "num_blocks"),
    constraints=lambda v: ("inplace=True needs save_for_backward=False (backward reads hidden_states)"
                           if v["inplace"] and v["save_for_backward"] else None),
    select={"num_blocks": gate_fwd_num_blocks},
    representative={"hc_mult": 4, "save_for_backward": True, "has_image_token_mask": True, "inplace": False},
    doc=_GATE_FWD_DOC,
)

_GATE_BWD_DOC = """\
Engram gate backward (hc = 4), per token t and head h, from the forward's saved raw dot, g, rx and rk (fp32):

    G  = Σ go·v                                   (go = grad_out[t, h], v = kv[t, hc])
    dg = 0  if ((|raw|·s)·rx)·rk < clamp_value,  else  (((G·g)·(1-g))·0.5) · sqrtf(((s·rx)·rk) / |raw|)
    cx = ((raw·rx)·rx) / H,   ck = ((raw·rk)·rk) / H
    grad_x[t, h]  = bf16(fma(fma(k, w, -(x·cx)), dg, go))
    grad_kv[t, h] = bf16(fma(x, w, -(k·ck)) · dg)
    grad_kv[t, hc] = bf16(fma(go_3, g_3, fma(go_2, g_2, fma(go_1, g_1, fma(go_0, g_0, +0)))))
    grad_w_partial[p, h] = Σ over the CTA's tokens, in token order, of fma(dg·x, k, acc), from +0

(the clamp test multiplies in another order than the forward's d, as the peer's). P = the SM count at run time
(``config.get_num_sms()``): CTA p takes the contiguous tokens [p·ceil(T/P), (p+1)·ceil(T/P)) and writes row p of the
partials, +0 where it has no token (so T = 0 still launches and zero-fills them); ``grad_w_reduce`` sums the rows.
The partials, and so the weight gradient, depend on P; nothing else does.

Evaluation order of G (the peer's): two warps per head, 256 threads; warp w (0, 1) of head h, lane l owns
{c·256 + 128w + 4l + j : j = 0..3}, summed serially c-major with fma, then a xor butterfly 16, 8, 4, 2, 1, then
G = S_0 + S_1. The fma forms above are the ones nvcc contracts the peer's expressions into, pinned explicitly
(x·cx, k·ck and dg·x rounded, k·w and x·w exact). Image tokens: grad_x = grad_out, grad_kv = 0 (all hc+1 rows), no
weight-gradient term.

Compile time: hc and whether a mask is given. Runtime: T, H (any multiple of 256 from 512), s, clamp_value and P.
A thread keeps the weight-gradient sums of its elements of the first 32 groups (H <= 8192) in registers and those of
the groups beyond in its own elements of grad_w_partial (read, fma, written back per token): same order, any H.
"""

ENGRAM_GATE_BWD = OpContract(
    op="engram_gate_bwd",
    kernel="kernels.engram.engram_gate_bwd",
    params=(
        Param("hc_mult", GATE_BWD_HC),
        Param("has_image_token_mask", (False, True)),
    ),
    args=("grad_out", "hidden_states", "kv", "weight_fused", "dot_in", "gate_in", "rstd_x_in", "rstd_k_in",
          "image_token_mask", "grad_x", "grad_kv", "grad_w_partial", "num_tokens", "num_groups", "scalar",
          "clamp_value", "num_partials"),
    representative={"hc_mult": 4, "has_image_token_mask": True},
    doc=_GATE_BWD_DOC,
)

CONTRACTS = (ENGRAM_GATE_FWD, ENGRAM_GATE_BWD)
