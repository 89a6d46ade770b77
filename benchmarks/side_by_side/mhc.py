"""Side-by-side cases of the mHC family (tile_kernels 2.1 ``mhc``, 18 ops) at DeepSeek-V4's shapes: n = 8192 tokens,
m = 4 streams (m(m+2) = 24 mix logits), hidden 4096 and 7168, 20 Sinkhorn iterations, post multiplier 2.0, eps 1e-6,
16 split-K partials of the norm GEMM.

Every case is compared bit for bit (``tol=None``): the peer's kernels use no atomics, so its results are
deterministic for a given GPU, and its per-SM partials (head and split mixes) use the SM count, which both packages
read from the same device. Where this package sums in an order of its own (docs/spec/mhc_*.md), the case says so:
there the comparison is expected to report a last-bits difference, and the comment gives the tolerance the peer's
own tests allow for that output.
"""
from functools import partial

import torch

from .common import Calls, Case, into, sm_count

M = 4                  # mhc_mult
M3 = M * (M + 2)       # pre, post and comb logits per token
REPEAT, POST_MULT, EPS = 20, 2.0, 1e-6
SPLITS = 16


def _bf16(*shape, device):
    return torch.randn(shape, device=device).to(torch.bfloat16)


def _nan(*shape, device, dtype=torch.float32):
    """A pure output's starting value: NaN, so an element one package leaves unwritten shows."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _streams(n, h, device):
    """The residual streams [n, m, H] bf16, each stream scaled a little differently (as the peer's tests make them)."""
    scale = (1 + 0.01 * torch.arange(M, device=device)).view(M, 1)
    return (torch.randn(n, M, h, device=device) * scale).to(torch.bfloat16)


def _softmax(*shape, device):
    return torch.softmax(torch.randn(shape, device=device), -1)


def _post_mix(*shape, device):
    return torch.sigmoid(torch.randn(shape, device=device)) * POST_MULT


# ---------------------------------------------------------------------------------------------------- streams

def _expand_fwd(device, n, H):
    x = _bf16(n, H, device=device)
    return into(lambda m, o: (m.mhc.expand_to_mhc_fwd(x, o), o)[1], _nan(n, M, H, device=device, dtype=torch.bfloat16))


def _expand_bwd(device, n, H):
    o_grad = _streams(n, H, device)
    return into(lambda m, xg: (m.mhc.expand_to_mhc_bwd(o_grad, xg), xg)[1],
                 _nan(n, H, device=device, dtype=torch.bfloat16))


def _apply_fwd(device, n, H):
    x, mix = _streams(n, H, device), _softmax(n, M, device=device)
    # the peer's bits but for the sign of a column whose every product is -0 (its chain starts from +0): random
    # inputs do not make one
    return into(lambda m, o: (m.mhc.mhc_pre_apply_mix_fwd(x, mix, o), o)[1],
                 _nan(n, H, device=device, dtype=torch.bfloat16))


def _apply_bwd(device, n, H):
    x, mix = _streams(n, H, device), _softmax(n, M, device=device)
    o_grad = _bf16(n, H, device=device)
    x_grad = _bf16(n, M, H, device=device)  # accumulated into (bf16 read-modify-write)
    # mix_grad (a sum over H) is reduced in the peer's order (per-thread fma chains over its 1024-column blocks, one
    # 128-thread butterfly), so bitwise for H a multiple of 1024 (2026-12-03-1cd1abc270); x_grad, one fma per
    # element, is the same bits
    return into(lambda m, xg: (m.mhc.mhc_pre_apply_mix_bwd(o_grad, x, mix, xg), xg), x_grad)


def _post_inputs(n, H, device):
    x, residual = _bf16(1, n, H, device=device), _streams(n, H, device).view(1, n, M, H)
    return x, residual, _post_mix(1, n, M, 1, device=device), _softmax(1, n, M, M, device=device)


def _post_fwd(device, n, H):
    x, residual, post, comb = _post_inputs(n, H, device)
    return Calls(run=lambda m: m.mhc.mhc_post_fwd(x, residual, post, comb))


def _post_bwd(device, n, H):
    x, residual, post, comb = _post_inputs(n, H, device)
    d_o = _bf16(1, n, M, H, device=device)
    # d_post and d_comb (sums over H) are reduced in the peer's order (64 threads, 512-column blocks, one butterfly):
    # bitwise for H a multiple of 512 (2026-12-03-1cd1abc270); d_x and d_residual, short fma chains over the
    # streams, are the same bits
    return Calls(run=lambda m: m.mhc.mhc_post_bwd(x, residual, post, comb, d_o))


def _multilayer(device, n, H, L, L_post):
    r0 = _streams(n, H, device)
    pre = [torch.sigmoid(torch.randn(n, M, device=device)) + EPS for _ in range(L)]
    out = [_bf16(n, H, device=device) for _ in range(L_post)]
    post = [_post_mix(n, M, device=device) for _ in range(L_post)]
    comb = [_softmax(n, M, M, device=device) for _ in range(L_post)]
    inputs = [_nan(n, H, device=device, dtype=torch.bfloat16) for _ in range(L)]            # written
    residuals = [_nan(n, M, H, device=device, dtype=torch.bfloat16) for _ in range(L_post)]  # written
    return into(lambda m, li, rl: (m.mhc.mhc_multilayer_recompute(r0, pre, out, post, comb, li, rl), li, rl)[1:],
                 inputs, residuals)


# ---------------------------------------------------------------------------------------------------- mixes

def _head_fwd(device, n):
    x, scale, base = torch.randn(n, M, device=device), torch.randn(1, device=device), torch.randn(M, device=device)
    return into(lambda m, o: (m.mhc.mhc_head_compute_mix_fwd(x, scale, base, o, EPS), o)[1], _nan(n, M, device=device))


def _head_bwd(device, n):
    x, go = torch.randn(n, M, device=device), torch.randn(n, M, device=device)
    scale, base = torch.randn(1, device=device), torch.randn(M, device=device)
    p = sm_count(device)  # the partial rows, the caller's num_sms
    # the scale and base partials (per-CTA sums) are reduced in our own lane order: equal to rounding (the peer's
    # tests: atol 1e-5, rtol 1e-4 on their sums); input_mix_grad is elementwise, the same bits
    return into(lambda m, gi, sp, bp: (m.mhc.mhc_head_compute_mix_bwd(go, x, scale, base, gi, sp, bp, p), gi, sp, bp)[1:],
                 _nan(n, M, device=device), _nan(p, 1, device=device), _nan(p, M, device=device))


def _split_params(device):
    return torch.randn(3, device=device) * 0.1, torch.randn(M3, device=device) * 0.1


def _split_fwd(device, n):
    a = torch.randn(n, M3, device=device)
    scale, base = _split_params(device)
    return into(lambda m, pre, post, comb: (m.mhc.mhc_pre_split_mixes_fwd(a, scale, base, pre, post, comb, POST_MULT,
                                                                           EPS), pre, post, comb)[1:],
                 _nan(n, M, device=device), _nan(n, M, device=device), _nan(n, M * M, device=device))


def _split_bwd(device, n):
    a = torch.randn(n, M3, device=device)
    scale, base = _split_params(device)
    post = torch.sigmoid(a[:, M:2 * M] * scale[1] + base[M:2 * M]) * POST_MULT  # the forward's saved post mix
    gp, gq, gc = torch.randn(n, M, device=device), torch.randn(n, M, device=device), torch.randn(n, M * M, device=device)
    # the scale and base gradients (per-SM partials, then their sum) are reduced in our own lane order: equal to
    # rounding (the peer's tests: atol 2e-5, rtol 1e-5); input_mixes_grad is elementwise, the same bits
    return into(lambda m, ga, sg, bg: (m.mhc.mhc_pre_split_mixes_bwd(gp, gq, gc, a, post, scale, base, ga, sg, bg,
                                                                      POST_MULT), ga, sg, bg)[1:],
                 _nan(n, M3, device=device), _nan(3, device=device), _nan(M3, device=device))


def _sinkhorn_fwd(device, n):
    x = torch.randn(n, M, M, device=device)
    # the row and column sums are the butterflies the peer's tile reductions lower to (one element per thread, so
    # not two-wide on SM100): bitwise (2026-12-03-1cd1abc270)
    return into(lambda m, o: (m.mhc.mhc_sinkhorn_fwd(x, o, REPEAT, EPS), o)[1], _nan(n, M, M, device=device))


def _sinkhorn_bwd(device, n):
    x, go = torch.randn(n, M, M, device=device), torch.randn(n, M, M, device=device)
    # the recomputed forward's sums and the backward's dot products: the same butterflies, bitwise
    return into(lambda m, gi: (m.mhc.mhc_sinkhorn_bwd(go, x, gi, REPEAT, EPS), gi)[1], _nan(n, M, M, device=device))


# ---------------------------------------------------------------------------------------------------- norm

def _merge_fwd(device, H):
    fn = torch.randn(M3, M * H, device=device) * 1e-4
    normw = torch.randn(M * H, device=device) * 0.1 + 1
    return into(lambda m, o: (m.mhc.mhc_fn_normw_merge_fwd(fn, normw, o), o)[1], _nan(M3, M * H, device=device))


def _merge_bwd(device, H):
    fn = torch.randn(M3, M * H, device=device) * 1e-4
    normw = torch.randn(M * H, device=device) * 0.1 + 1
    g = torch.randn(M3, M * H, device=device)
    # both gradients are accumulated into
    return into(lambda m, fg, wg: (m.mhc.mhc_fn_normw_merge_bwd(fn, normw, g, fg, wg), fg, wg)[1:],
                 torch.randn(M3, M * H, device=device), torch.randn(M * H, device=device))


def _norm_partials(n, H, device):
    """The norm GEMM's split-K partials: ``[S, n, m3]`` projections and ``[S, n]`` sums of squares of the m·H
    residual elements (about m·H / S each, so the RMS is about 1)."""
    out_mul = torch.randn(SPLITS, n, M3, device=device) * 1e-2
    sqrsum = torch.rand(SPLITS, n, device=device) * (2 * M * H / SPLITS)
    return out_mul, sqrsum


def _reduce_fwd(device, n, H):
    oms, sqs = _norm_partials(n, H, device)
    oms, sqs = oms.view(SPLITS, n, 1, M3), sqs.view(SPLITS, n, 1)  # one RMS group of m·H
    return into(lambda m, om, sq, out: (m.mhc.mhc_reduce_partials_and_rmsnorm_fwd(oms, sqs, om, sq, out, M * H, EPS,
                                                                                  SPLITS), om, sq, out)[1:],
                 _nan(n, 1, M3, device=device), _nan(n, 1, device=device), _nan(n, M3, device=device))


def _reduce_bwd(device, n, H):
    og, om = torch.randn(n, M3, device=device), torch.randn(n, 1, M3, device=device)
    sq = torch.rand(n, 1, device=device) * (2 * M * H)
    # sqrsum_grad holds sum_j out_grad * out_mul, a 32-lane butterfly in both (bitwise for m3 <= 32,
    # 2026-12-03-1cd1abc270); out_mul_grad is elementwise, the same bits
    return into(lambda m, omg, sqg: (m.mhc.mhc_reduce_partials_and_rmsnorm_bwd(og, om, sq, omg, sqg, M * H, EPS), omg,
                                      sqg)[1:],
                 _nan(n, 1, M3, device=device), _nan(n, 1, device=device))


def _big_fuse(device, n, H):
    gm, gs = _norm_partials(n, H, device)
    scale, base = _split_params(device)
    residual = _streams(n, H, device)
    # comb_mix goes through the Sinkhorn's butterflies, as mhc_sinkhorn_fwd; post_mix and layer_input (serial split
    # sums, then elementwise steps): all three the same bits (2026-12-03-1cd1abc270)
    return into(lambda m, post, comb, li: (m.mhc.mhc_pre_big_fuse_fwd(gm, gs, scale, base, residual, post, comb, li, EPS,
                                                                      EPS, EPS, POST_MULT, REPEAT, SPLITS),
                                            post, comb, li)[1:],
                 _nan(n, M, device=device), _nan(n, M * M, device=device),
                 _nan(n, H, device=device, dtype=torch.bfloat16))


def cases(quick=False):
    n = 256 if quick else 8192  # tokens

    def case(name, build, shown=None, **params):
        """``shown``: parameters named in the record only (fixed by the module or derived from the device)."""
        return Case(f"mhc.{name}", {**params, **(shown or {})}, partial(build, **params))

    m = {"m": M}
    yield case("expand_to_mhc_fwd", _expand_fwd, m, n=n, H=7168)
    yield case("expand_to_mhc_bwd", _expand_bwd, m, n=n, H=7168)
    yield case("mhc_head_compute_mix_fwd", _head_fwd, m, n=n)
    yield case("mhc_head_compute_mix_bwd", _head_bwd, {**m, "P": "SMs"}, n=n)
    yield case("mhc_pre_split_mixes_fwd", _split_fwd, {**m, "post_mult": POST_MULT}, n=n)
    yield case("mhc_pre_split_mixes_bwd", _split_bwd, {**m, "post_mult": POST_MULT}, n=n)
    yield case("mhc_sinkhorn_fwd", _sinkhorn_fwd, {**m, "repeat": REPEAT}, n=n)
    yield case("mhc_sinkhorn_bwd", _sinkhorn_bwd, {**m, "repeat": REPEAT}, n=n)
    for h in (4096, 7168):
        yield case("mhc_pre_apply_mix_fwd", _apply_fwd, m, n=n, H=h)
        yield case("mhc_pre_apply_mix_bwd", _apply_bwd, m, n=n, H=h)
        yield case("mhc_post_fwd", _post_fwd, m, n=n, H=h)
        yield case("mhc_post_bwd", _post_bwd, m, n=n, H=h)
    yield case("mhc_fn_normw_merge_fwd", _merge_fwd, {"rows": M3, "cols": M * 7168}, H=7168)
    yield case("mhc_fn_normw_merge_bwd", _merge_bwd, {"rows": M3, "cols": M * 7168}, H=7168)
    yield case("mhc_reduce_partials_and_rmsnorm_fwd", _reduce_fwd, {"S": SPLITS, "G": 1, "m3": M3}, n=n, H=7168)
    yield case("mhc_reduce_partials_and_rmsnorm_bwd", _reduce_bwd, {"G": 1, "m3": M3}, n=n, H=7168)
    for h in (4096, 7168):
        yield case("mhc_pre_big_fuse_fwd", _big_fuse, {**m, "S": SPLITS, "repeat": REPEAT, "post_mult": POST_MULT},
                   n=n, H=h)
    yield case("mhc_multilayer_recompute", _multilayer, m, n=n, H=4096, L=3, L_post=2)
