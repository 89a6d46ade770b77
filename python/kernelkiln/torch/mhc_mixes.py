"""References of the mHC mix ops (tile_kernels 2.1 ``mhc``): head mix, split mixes, fn/normw merge, split-K
reduction with RMS normalization, and their backwards (torch only).

Two kinds:

* ``mhc_head_compute_mix_ref``, ``mhc_pre_split_mixes_ref``, ``mhc_pre_norm_fn_ref`` and
  ``mhc_pre_norm_fn_partials_ref`` have tile_kernels 2.1's names, signatures and semantics (plain torch ops,
  differentiable): the tolerance oracles.
* ``*_fwd_ref`` / ``*_bwd_ref`` compute what our kernels compute in the kernels' order (each fma, the summation
  order of every partial, the butterfly; specification in kernelkiln_contract.mhc_mixes), on any device. On the GPU
  they are bit-identical to the kernels (torch's CUDA exp and rsqrt are the same expf and rsqrtf); on the CPU those
  two functions differ from CUDA's in the last bits, so there the sigmoid and RMS factors agree to rounding, and
  everything else (fma, the sums, the divisions) is exact.

Divisions by a value the kernel holds in a register take a tensor divisor here: torch's CUDA division by a Python
scalar multiplies by its reciprocal, which is not the IEEE quotient.
"""
import torch

from kernelkiln.torch.fused import fma_f32

__all__ = ["mhc_head_compute_mix_ref", "mhc_pre_split_mixes_ref", "mhc_pre_norm_fn_ref", "mhc_pre_norm_fn_partials_ref",
           "mhc_head_compute_mix_fwd_ref", "mhc_head_compute_mix_bwd_ref", "mhc_pre_split_mixes_fwd_ref",
           "mhc_pre_split_mixes_bwd_ref", "mhc_fn_normw_merge_fwd_ref", "mhc_fn_normw_merge_bwd_ref",
           "mhc_reduce_partials_and_rmsnorm_fwd_ref", "mhc_reduce_partials_and_rmsnorm_bwd_ref"]

_THREADS = 128  # threads of the head-mix backward and of the split reduce (kernelkiln_contract.mhc_mixes)
_HEAD_BWD_BLOCK = 32  # the head mix backward's token block (kernelkiln_contract.mhc_mixes.HEAD_BWD_BLOCK_TOKENS)
_SPLIT_BWD_BLOCK = 32  # the split mixes backward's token block (kernelkiln_contract.mhc_mixes.SPLIT_BWD_BLOCK_TOKENS)


# ------------------------------------------------------------------------------------------------ the peer's forms
def mhc_head_compute_mix_ref(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    """``sigmoid(input_mix · mhc_scale + mhc_base) + mhc_pre_eps`` (mhc_scale ``[1]`` broadcast, mhc_base ``[m]``)."""
    return torch.sigmoid(input_mix * mhc_scale + mhc_base) + mhc_pre_eps


def _column_scales(mhc_scale, m):
    """mhc_scale ``[3]`` spread over the m(m+2) logit columns: entry min(2, j // m) for column j."""
    groups = (torch.arange(m * (m + 2), device=mhc_scale.device) // m).clamp(max=2)
    return mhc_scale[groups]


def mhc_pre_split_mixes_ref(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    """The three mixes from ``input_mixes [a, b, m(m+2)]``: pre ``[a, b, m, 1]`` = sigmoid + eps, post ``[a, b, m, 1]``
    = sigmoid · post_mult, comb ``[a, b, m, m]`` = the scaled, shifted logits."""
    m = mhc_mult
    a, b = input_mixes.shape[:2]
    z = input_mixes * _column_scales(mhc_scale, m) + mhc_base
    pre = (torch.sigmoid(z[..., :m]) + mhc_pre_eps).unsqueeze(-1)
    post = (torch.sigmoid(z[..., m:2 * m]) * mhc_post_mult_value).unsqueeze(-1)
    comb = z[..., 2 * m:].reshape(a, b, m, m)
    return pre, post, comb


def mhc_pre_norm_fn_ref(residual, mhc_fn, mhc_norm_weight, mhc_norm_eps):
    """The pre-block's normalized mix logits ``[a, b, m3]``: the residual streams ``[a, b, m, H]`` flattened to one
    row of m·H per token, times ``mhc_fn [m3, m·H]`` (with ``mhc_norm_weight [m·H]`` folded in when given), scaled
    by the row's ``rsqrt(mean of squares + eps)``. fp32 (TF32 where torch's matmul setting allows)."""
    if mhc_norm_weight is not None:
        mhc_fn = mhc_fn * mhc_norm_weight
    x = residual.flatten(2, 3).float()
    group = mhc_fn.shape[-1]
    logits = torch.matmul(x, mhc_fn.t())
    sqrsum = x.square().sum(-1, keepdim=True)
    return logits * (sqrsum / group + mhc_norm_eps).rsqrt()


def mhc_pre_norm_fn_partials_ref(residual, fn, n_splits):
    """Split-K partials of the pre-norm GEMM, what a split-K GEMM leaves for ``mhc_reduce_partials_and_rmsnorm_fwd``:
    the m·H reduction dimension cut into n_splits equal chunks, ``out_mul [S, n, 1, m3]`` (the chunk's x · fn) and
    ``sqrsum [S, n, 1]`` (the chunk's Σ x²), n = a·b tokens of ``residual [a, b, m, H]``."""
    m3, k = fn.shape
    x = residual.float().reshape(-1, k)
    chunk = k // n_splits
    out_mul = torch.empty(n_splits, x.shape[0], 1, m3, dtype=torch.float32, device=residual.device)
    sqrsum = torch.empty(n_splits, x.shape[0], 1, dtype=torch.float32, device=residual.device)
    for i in range(n_splits):
        piece = x[:, i * chunk:(i + 1) * chunk]
        out_mul[i, :, 0] = torch.matmul(piece, fn[:, i * chunk:(i + 1) * chunk].t())
        sqrsum[i, :, 0] = piece.square().sum(-1)
    return out_mul, sqrsum


# ------------------------------------------------------------------------------------------------ kernel order
def _full(v, like):
    return torch.full_like(like, v, dtype=torch.float32)


def _sigmoid(z):
    """``1 / (1 + exp(-z))``, each step rounded once (the kernels' __fdiv_rn and __fadd_rn)."""
    one = _full(1.0, z)
    return one / (one + torch.exp(-z))


def _butterfly(acc, lowest=1):
    """The xor butterfly over the last (thread) axis, 32 lanes or a CTA's 128 threads: ``v + v[t ^ o]`` for o = half
    the axis, ..., lowest. With lowest 1 every thread ends with the same sum."""
    threads = torch.arange(acc.shape[-1], device=acc.device)
    off = acc.shape[-1] // 2
    while off >= lowest:
        acc = acc + acc[..., threads ^ off]
        off //= 2
    return acc


def mhc_head_compute_mix_fwd_ref(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    """``output_mix = sigmoid(fma(x, s, b)) + eps`` in the kernel's steps."""
    z = fma_f32(input_mix, mhc_scale[0], mhc_base)
    return _sigmoid(z) + _full(mhc_pre_eps, z)


def mhc_head_compute_mix_bwd_ref(output_mix_grad, input_mix, mhc_scale, mhc_base, num_sms):
    """``(input_mix_grad [n, m], mhc_scale_grad_partial [P, 1], mhc_base_grad_partial [P, m])`` with P = num_sms, in
    the kernel's (and the peer's) order: ``gz = (p·(1 - p))·go``, ``input_mix_grad = gz·s``; CTA pid walks the
    32-token blocks pid, pid + P, ..., thread tx the elements tx, tx + 128, ... of each block's [32, m] values
    (fma of gz·x, plain sums of gz), then the CTA butterflies (offsets 64 .. 1 for the scale, 64 .. m for the base)."""
    n, m = input_mix.shape
    s = mhc_scale[0]
    p = _sigmoid(fma_f32(input_mix, s, mhc_base))
    gz = (p * (_full(1.0, p) - p)) * output_mix_grad
    grad = gz * s
    block = _HEAD_BWD_BLOCK * m  # elements per token block
    blocks = -(-n // _HEAD_BWD_BLOCK)
    steps = -(-blocks // num_sms)
    per_thread = max(1, block // _THREADS)

    def walk(x):  # [n, m] -> [K, P, elements per thread, 128 threads], padding (skipped by the kernel) zero
        flat = torch.zeros(steps * num_sms, per_thread * _THREADS, dtype=torch.float32, device=x.device)
        padded = torch.zeros(steps * num_sms * block, dtype=torch.float32, device=x.device)
        padded[:n * m] = x.reshape(-1)
        flat[:, :block] = padded.view(steps * num_sms, block)
        return flat.view(steps, num_sms, per_thread, _THREADS)

    g, a = walk(gz), walk(input_mix)
    acc_s = torch.zeros(num_sms, _THREADS, dtype=torch.float32, device=input_mix.device)
    acc_b = torch.zeros(num_sms, _THREADS, dtype=torch.float32, device=input_mix.device)
    for k in range(steps):
        for i in range(per_thread):
            acc_s = fma_f32(g[k, :, i], a[k, :, i], acc_s)
            acc_b = acc_b + g[k, :, i]
    scale = _butterfly(acc_s)[:, :1]
    base = _butterfly(acc_b, lowest=m)[:, :m]
    return grad, scale.contiguous(), base.contiguous()


def mhc_pre_split_mixes_fwd_ref(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    """``(pre [n, m], post [n, m], comb [n, m²])`` from ``input_mixes [n, m(m+2)]`` in the kernel's steps:
    ``z = fma(a, scale[min(2, j // m)], base)``, pre = sigmoid(z) + eps, post = sigmoid(z) · post_mult, comb = z."""
    m = mhc_mult
    z = fma_f32(input_mixes, _column_scales(mhc_scale, m), mhc_base)
    pre = _sigmoid(z[..., :m]) + _full(mhc_pre_eps, z[..., :m])
    post = _sigmoid(z[..., m:2 * m]) * _full(mhc_post_mult_value, z[..., :m])
    return pre, post, z[..., 2 * m:].contiguous()


def mhc_pre_split_mixes_bwd_ref(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes,
                                post_layer_mix, mhc_scale, mhc_base, mhc_post_mult_value, num_sms):
    """``(input_mixes_grad [n, m3], mhc_scale_grad [3], mhc_base_grad [m3])`` in the kernels' (and the peer's) order,
    with P = num_sms partial rows (the op uses config.get_num_sms()): the logit gradient g per column (pre: ``(gp·p)·(1
    - p)``, p recomputed; post: ``(gq·q)·(1 - q / post_mult)``, q saved; comb: gc); CTA pid walks the 32-token blocks
    pid, pid + P, ..., one token per lane (lanes past the end on rows of zeros); per block the lane butterfly of ``+0 +
    g`` added to each column's base sum; per lane ``scale[k] = fma(g, a, scale[k])`` in column order, butterflied at
    the end; then the reduce kernel's order over the P rows."""
    n, m = pre_layer_mix_grad.shape
    m3 = m * (m + 2)
    dev = input_mixes.device
    blocks = -(-n // _SPLIT_BWD_BLOCK)
    steps = -(-blocks // num_sms)
    rows = steps * num_sms * _SPLIT_BWD_BLOCK  # >= n

    def pad(x):
        out = torch.zeros(rows, x.shape[1], dtype=torch.float32, device=dev)
        out[:n] = x
        return out

    a, q = pad(input_mixes), pad(post_layer_mix)
    one = _full(1.0, q)
    p = _sigmoid(fma_f32(a[:, :m], mhc_scale[0], mhc_base[:m]))
    g_pre = (pad(pre_layer_mix_grad) * p) * (one - p)
    g_post = (pad(post_layer_mix_grad) * q) * (one - q / _full(mhc_post_mult_value, q))
    g = torch.cat([g_pre, g_post, pad(comb_res_mix_grad)], dim=1)  # padded rows too: the kernel computes them
    grad = g[:n] * _column_scales(mhc_scale, m)
    gt = g[:steps * num_sms * _SPLIT_BWD_BLOCK].view(steps, num_sms, _SPLIT_BWD_BLOCK, m3)
    at = a[:steps * num_sms * _SPLIT_BWD_BLOCK].view(steps, num_sms, _SPLIT_BWD_BLOCK, m3)
    live = (torch.arange(steps, device=dev)[:, None] * num_sms + torch.arange(num_sms, device=dev)) < blocks
    acc_b = torch.zeros(num_sms, m3, dtype=torch.float32, device=dev)
    acc_s = torch.zeros(num_sms, _SPLIT_BWD_BLOCK, 3, dtype=torch.float32, device=dev)
    for k in range(steps):
        block_sums = _butterfly((_full(0.0, gt[k]) + gt[k]).transpose(1, 2))[..., 0]  # [P, m3]
        acc_b = torch.where(live[k, :, None], acc_b + block_sums, acc_b)
        for j in range(m3):
            grp = min(2, j // m)
            acc_s[..., grp] = torch.where(live[k, :, None], fma_f32(gt[k, :, :, j], at[k, :, :, j], acc_s[..., grp]),
                                          acc_s[..., grp])
    part_s = _butterfly(acc_s.transpose(1, 2))[..., 0]  # [P, 3]
    return grad, _split_reduce(part_s), _split_reduce(acc_b)


def _split_reduce(partials):
    """The reduce kernel's order over the P rows of ``partials [P, c]``: thread tx adds rows tx, tx + 128, ... to +0,
    then the CTA butterfly (offsets 64 .. 1)."""
    p, c = partials.shape
    steps = -(-p // _THREADS)
    padded = torch.zeros(steps * _THREADS, c, dtype=torch.float32, device=partials.device)
    padded[:p] = partials
    acc = torch.zeros(_THREADS, c, dtype=torch.float32, device=partials.device)
    for i in range(steps):
        acc = acc + padded[i * _THREADS:(i + 1) * _THREADS]
    return _butterfly(acc.t())[:, 0].contiguous()


def mhc_fn_normw_merge_fwd_ref(fn, normw):
    """``fn · normw`` (one rounding per element)."""
    return fn * normw


def mhc_fn_normw_merge_bwd_ref(fn, normw, out_fn_grad, fn_grad, normw_grad):
    """In place, in the kernel's order: ``fn_grad = fma(g, normw, fn_grad)``; per column ``acc = fma(g, fn, acc)``
    over the rows in order from +0, then ``normw_grad = normw_grad + acc``; returns None."""
    fn_grad.copy_(fma_f32(out_fn_grad, normw, fn_grad))
    acc = torch.zeros_like(normw_grad)
    for r in range(fn.shape[0]):
        acc = fma_f32(out_fn_grad[r], fn[r], acc)
    normw_grad.copy_(normw_grad + acc)


def _rms_factor(sq, rms_group_size, rms_eps):
    return torch.rsqrt(sq / _full(float(rms_group_size), sq) + _full(rms_eps, sq))


def mhc_reduce_partials_and_rmsnorm_fwd_ref(out_mul_splitted, sqrsum_splitted, rms_group_size, rms_eps):
    """``(out_mul [n, G, m3], sqrsum [n, G], out [n, m3])`` in the kernel's order: the splits added in order from +0,
    ``r = rsqrt(sq / gs + eps)``, ``out = om_0·r_0`` then ``fma(om_g, r_g, out)`` for the later groups."""
    s_count, n, groups, m3 = out_mul_splitted.shape
    om = torch.zeros(n, groups, m3, dtype=torch.float32, device=out_mul_splitted.device)
    sq = torch.zeros(n, groups, dtype=torch.float32, device=out_mul_splitted.device)
    for s in range(s_count):
        om = om + out_mul_splitted[s]
        sq = sq + sqrsum_splitted[s]
    r = _rms_factor(sq, rms_group_size, rms_eps)
    out = torch.zeros(n, m3, dtype=torch.float32, device=out_mul_splitted.device)
    for g in range(groups):
        term = om[:, g], r[:, g:g + 1]
        out = term[0] * term[1] if g == 0 else fma_f32(term[0], term[1], out)
    return om, sq, out


def mhc_reduce_partials_and_rmsnorm_bwd_ref(out_grad, out_mul, sqrsum, rms_group_size, rms_eps):
    """``(out_mul_grad [n, G, m3], sqrsum_grad [n, G])`` in the kernel's order (the peer's): ``out_mul_grad =
    og·r``; ``d = Σ_j og_j·om_j`` with lane l of 32 taking ``fma(og_j, om_j, acc)`` from +0 over j = l, l + 32, ..,
    then the lanes added by the xor butterfly (offsets 16 .. 1: the upper half onto the lower half until one is
    left); ``sqrsum_grad = ((d·r) / (sq + c)) / -2`` with c = fp32(eps·gs) taken in float64."""
    r = _rms_factor(sqrsum, rms_group_size, rms_eps)
    out_mul_grad = out_grad.unsqueeze(1) * r.unsqueeze(-1)
    m3 = out_mul.shape[-1]
    lanes = torch.zeros(sqrsum.shape + (32,), dtype=torch.float32, device=sqrsum.device)
    for j in range(m3):
        lanes[..., j % 32] = fma_f32(out_grad[:, j:j + 1], out_mul[..., j], lanes[..., j % 32])
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    d = lanes[..., 0]
    c = _full(float(rms_eps) * rms_group_size, sqrsum)
    return out_mul_grad, ((d * r) / (sqrsum + c)) / _full(-2.0, sqrsum)
