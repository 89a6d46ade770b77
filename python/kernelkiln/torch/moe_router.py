"""References of the tile_kernels 2.1 fused router and the v1 auxiliary MoE ops (docs/SPEC.md §2.3, §3.1, §3.7).

* ``philox4x32_10`` / ``curand_uniform``: curand's Philox4_32_10 generator (checked against the Random123
  known-answer vectors) with ``curand_init(seed, subsequence, offset=0)``'s layout: key = (seed lo, seed hi),
  counter = (0, 0, subsequence lo, subsequence hi); the first ``curand()`` is output word x, the second y.
* ``moe_topk_gate_forward`` / ``moe_topk_gate_backward``: the sqrt-softplus router and its gradient.
* v1 ``mask_indices_by_tp``, ``group_count``, ``aux_fi``, ``inplace_unique_group_indices``.

Imports only torch. Run on the GPU tensors for bit-exact comparisons: softplus/sqrt then use torch's
CUDA formulas, which the kernel reproduces (expf, log1pf, sqrtf, IEEE division).
"""
import torch

from .moe import _NORMALIZE_EPS, _PHYSICAL_HASH, _mask_indices_by_tp, _warp_butterfly_sum

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "aux_fi",
    "group_count",
    "inplace_unique_group_indices",
    "mask_indices_by_tp",
    "moe_topk_gate_backward",
    "moe_topk_gate_forward",
    "philox4x32_10",
]

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_U32 = 0xFFFFFFFF
_WARP = 32
_INT_MAX = 2**31 - 1


def philox4x32_10(counter, key):
    """Philox4x32-10 on int64 tensors holding uint32 words: counter (..., 4), key (..., 2) -> (..., 4).

    Products of two uint32 wrap in int64, but their bit pattern mod 2**64 is exact, so the high word is
    ``(p >> 32) & 0xFFFFFFFF`` and the low word ``p & 0xFFFFFFFF``.
    """
    c = [counter[..., i] & _U32 for i in range(4)]
    k0, k1 = key[..., 0] & _U32, key[..., 1] & _U32
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & _U32, (k1 + _W1) & _U32
        p0, p1 = c[0] * _M0, c[2] * _M1
        hi0, lo0 = (p0 >> 32) & _U32, p0 & _U32
        hi1, lo1 = (p1 >> 32) & _U32, p1 & _U32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return torch.stack(c, dim=-1)


def curand_philox_first_block(seed, subsequence):
    """The first 4 words curand draws after ``curand_init(seed, subsequence, 0)``; subsequence int64 tensor."""
    sub = subsequence.to(torch.int64)
    zero = torch.zeros_like(sub)
    counter = torch.stack([zero, zero, sub & _U32, (sub >> 32) & _U32], dim=-1)
    key = torch.stack([zero + (seed & _U32), zero + ((seed >> 32) & _U32)], dim=-1)
    return philox4x32_10(counter, key)


def curand_uniform(words):
    """curand_uniform of uint32 words (int64 tensor): float(x) * 2**-32 + 2**-33 in fp32 (the product is exact)."""
    return words.to(torch.float32) * 2.0**-32 + 2.0**-33


def _random_rows(tokens, num_slots, num_physical, seed):
    """(idx [n, P] int64, weight [n, P] fp32) of force_random rows: the kernel's warp insert-and-shift scheme.

    Lane l draws the weight (1st word) and r_l = 2nd word % (N - l). Then P rounds: the smallest pending r
    (lowest lane on ties) is final; pending lanes above that lane whose r >= it step up by one.
    """
    n = tokens.shape[0]
    lanes = torch.arange(_WARP, device=tokens.device, dtype=torch.int64)
    words = curand_philox_first_block(seed, tokens.to(torch.int64)[:, None] * _WARP + lanes[None, :])
    weight = curand_uniform(words[..., 0])
    active = lanes < num_slots
    tmp = torch.where(active, words[..., 1] % (num_physical - lanes).clamp(min=1), _INT_MAX)
    fin = torch.where(active, -1, _INT_MAX).expand(n, _WARP).clone()
    for _ in range(num_slots):
        low = tmp.min(dim=1, keepdim=True).values
        low_lane = torch.where(tmp == low, lanes, _INT_MAX).min(dim=1, keepdim=True).values
        pending = fin == -1
        bump = pending & (tmp >= low) & (low_lane < lanes)
        take = pending & ~bump & (low_lane == lanes)
        fin = torch.where(take, tmp, fin)
        tmp = torch.where(take, _INT_MAX, torch.where(bump, tmp + 1, tmp))
    return fin[:, :num_slots], weight[:, :num_slots]


def sqrt_softplus(logits):
    """s = sqrt(x > 20 ? x : log1p(exp(x))) in fp32 (torch's softplus formula with beta 1)."""
    return torch.nn.functional.softplus(logits).sqrt()


def sqrt_softplus_grad(s):
    """ds/dx recovered from s (docs/SPEC.md §2.3): u = s²; u < 1: (s/2)(1 + u·Q(u)); else 0.5(1 - exp(-u))/s."""
    u = s * s
    half = 0.5 * s
    q = torch.full_like(u, 0.000129130945)
    for c in (-0.00130112655, 0.00827621203, -0.041647464, 0.166663632, -0.499999821):
        q = q * u + c
    small = (u * q) * half + half
    large = 0.5 * ((1.0 - torch.exp(-u)) / s)
    return torch.where(u < 1.0, small, large)


def moe_topk_gate_forward(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
                          scoring_func='sqrtsoftplus', mask=None, bias=None, image_bias=None, image_token_mask=None,
                          fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None,
                          out=None, force_random=None, scores=None):
    """Reference of 2.1 ``moe.moe_topk_gate_forward`` -> (topk_idx [T, K+S] int64, topk_weights [T, K+S] fp32).

    Row kinds, in priority order: masked (idx -1, weight 0, unmapped -1, scores 0); force_random (K+S distinct
    physical ids in [0, N) and curand_uniform weights, unmapped -1, scores 0, no map); fixed (experts from
    ``unmapped_topk_idx``, left unchanged; entries outside [0, E) give idx -1 and weight 0); routed (stable
    top-K of s + bias, image_bias for image tokens). Weights: s_k / (butterfly Σ s + 1e-20) · rsf; shared
    slots E + j with weight 1; then the EPLB map. ``scores`` gets s of every routed or fixed row.
    """
    if scoring_func != 'sqrtsoftplus':
        raise ValueError(f"scoring_func must be 'sqrtsoftplus', got {scoring_func!r}")
    t, e = logits.shape
    dev = logits.device
    s_count = num_shared_experts if use_shared_as_routed else 0
    width = num_topk + s_count
    active = torch.ones(t, dtype=torch.bool, device=dev) if mask is None else mask.bool()
    rand = torch.zeros(t, dtype=torch.bool, device=dev) if force_random is None else force_random.bool() & active
    routed = active & ~rand
    if not bool((torch.isfinite(logits).all(1) | ~routed).all()):
        raise ValueError('logits of routed tokens must be finite (the kernel reports NaN/inf)')
    s = sqrt_softplus(logits)
    add = torch.zeros(e, dtype=torch.float32, device=dev) if bias is None else bias
    biased = s + add[None, :]
    if image_token_mask is not None and image_bias is not None:
        biased = torch.where(image_token_mask.bool()[:, None], s + image_bias[None, :], biased)
    idx = torch.sort(biased, dim=1, descending=True, stable=True).indices[:, :num_topk]
    fixed = torch.zeros(t, dtype=torch.bool, device=dev)
    if fix_routing_mask is not None and unmapped_topk_idx is not None:
        fixed = fix_routing_mask.bool() & routed
        given = torch.where((unmapped_topk_idx < 0) | (unmapped_topk_idx >= e), -1, unmapped_topk_idx)
        idx = torch.where(fixed[:, None], given, idx)
    logical_idx = idx
    picked = torch.where(idx >= 0, s.gather(1, idx.clamp(min=0)), torch.zeros((), device=dev))
    den = _warp_butterfly_sum(picked) + torch.full((t,), _NORMALIZE_EPS, dtype=torch.float32, device=dev)
    weights = picked / den[:, None] * torch.tensor(routed_scaling_factor, dtype=torch.float32)
    if s_count:
        idx = torch.cat([idx, torch.arange(e, e + s_count, device=dev).expand(t, s_count)], dim=1)
        weights = torch.cat([weights, torch.ones((t, s_count), dtype=torch.float32, device=dev)], dim=1)
    num_physical = e + s_count
    if to_physical_map is not None and logical_count is not None:
        num_physical = int(logical_count.long().sum())
        valid = idx >= 0
        logical = idx.clamp(min=0)
        token = torch.arange(t, device=dev, dtype=torch.int64)[:, None]
        dup = (ep_rank + token * _PHYSICAL_HASH) % logical_count.long()[logical].clamp(min=1)
        idx = torch.where(valid, to_physical_map.long()[logical, dup], -1)
    if bool(rand.any()):
        rows = rand.nonzero().flatten()
        r_idx, r_w = _random_rows(rows, width, num_physical, ep_rank)
        idx[rows], weights[rows] = r_idx, r_w
    idx = torch.where(active[:, None], idx, -1)
    weights = torch.where(active[:, None], weights, torch.zeros((), device=dev))
    if unmapped_topk_idx is not None:
        new = torch.where(routed[:, None], logical_idx, -1)
        unmapped_topk_idx.copy_(torch.where(fixed[:, None], unmapped_topk_idx, new))
    if scores is not None:
        scores.copy_(torch.where(routed[:, None], s, torch.zeros((), device=dev)))
    if out is not None:
        out[0].copy_(idx)
        out[1].copy_(weights)
        return out
    return idx.contiguous(), weights.contiguous()


def moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor,
                           scoring_func='sqrtsoftplus', mask=None, grad_scores_sum=None, out=None):
    """Reference of 2.1 ``moe.moe_topk_gate_backward`` -> grad_logits [T, E] fp32 (docs/SPEC.md §3.1).

    Route term: D = Σ_valid s_j + 1e-20, dL/ds_j += (rsf·g_j − ⟨g, w⟩)/D (duplicates accumulate, -1 skipped).
    Aux term (mask + grad_scores_sum [Q, E]): tokens in mask add (h − ⟨h, s⟩/Σs)/Σs, h = row t // (T/Q).
    Both times ds/dx from s. The peer kernel is fast-math: compare with a tolerance, not bit for bit.
    """
    if scoring_func != 'sqrtsoftplus':
        raise ValueError(f"scoring_func must be 'sqrtsoftplus', got {scoring_func!r}")
    t, e = scores.shape
    valid = topk_idx >= 0
    safe = topk_idx.clamp(min=0)
    zero = torch.zeros((), device=scores.device)
    picked = torch.where(valid, scores.gather(1, safe), zero)
    g = torch.where(valid, grad_topk_weights, zero)
    dot = (g * topk_weights).sum(1, keepdim=True)
    den = picked.sum(1, keepdim=True) + _NORMALIZE_EPS
    route = torch.zeros_like(scores).scatter_add_(1, safe, torch.where(valid, (routed_scaling_factor * g - dot) / den,
                                                                      zero))
    if grad_scores_sum is not None and mask is not None and t:
        h = grad_scores_sum.repeat_interleave(t // grad_scores_sum.shape[0], dim=0)
        inv = torch.where(mask.bool()[:, None], 1.0 / scores.sum(1, keepdim=True), zero)
        route = route + (h - (h * scores).sum(1, keepdim=True) * inv) * inv
    grad = sqrt_softplus_grad(scores) * route
    if out is not None:
        out.copy_(grad)
        return out
    return grad


# ---------------------------------------------------------------------------------------------
# v1 auxiliary ops

def mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    """v1 ``mask_indices_by_tp``: keep this TP rank's experts, renumbered locally; others and -1 -> -1."""
    return _mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks).to(indices.dtype)


def group_count(group_idx, num_groups):
    """v1 ``group_count``: int32 histogram [G] of the ids in group_idx ([T, K] int64); -1 ignored."""
    flat = group_idx.flatten()
    flat = flat[flat >= 0]
    return torch.bincount(flat, minlength=num_groups)[:num_groups].to(torch.int32)


def aux_fi(topk_idx, num_experts, num_aux_topk):
    """v1 ``aux_fi``: f_i = count_i · E / (T · num_aux_topk) in fp32 ([E]); -1 entries ignored.

    Computed as fp32(count_i · E) / fp32(T · num_aux_topk): both integer terms are exact below 2**24.
    """
    t = topk_idx.shape[0]
    counts = group_count(topk_idx, num_experts).to(torch.int64)
    den = torch.tensor(float(max(t * num_aux_topk, 1)), dtype=torch.float32, device=topk_idx.device)
    return (counts * num_experts).to(torch.float32) / den


def inplace_unique_group_indices(group_indices, num_groups):
    """v1 ``inplace_unique_group_indices``: later repeats of an id within a row become -1 (in place)."""
    k = group_indices.shape[1]
    if k > 1:
        earlier = torch.triu(torch.ones(k, k, dtype=torch.bool, device=group_indices.device), diagonal=1)
        same = group_indices[:, :, None] == group_indices[:, None, :]  # [t, i, j]: id_i == id_j
        dup = (same & earlier[None]).any(1) & (group_indices >= 0)  # some i < j has the same id
        group_indices.masked_fill_(dup, -1)
    return None
