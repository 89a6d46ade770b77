"""Bit-exact PyTorch references for MoE routing helpers (docs/SPEC.md §2.3, §3.1)."""

import torch

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "normalize_weight",
    "stable_topk",
    "top2_sum_gate",
    "topk_gate_ref",
    "topk_sum_and_topk_group_idx",
]

_WARP_SIZE = 32
_BUTTERFLY_OFFSETS = (16, 8, 4, 2, 1)
# Added after the sum so an all-zero row divides by a tiny number, not by zero.
_NORMALIZE_EPS = 1e-20


def _check_scores(scores, k, name_k, max_k=None):
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        raise TypeError('scores must be a floating-point torch.Tensor')
    if scores.dim() != 2:
        raise ValueError(f'scores must be 2-D [T, E], got shape {tuple(scores.shape)}')
    if not isinstance(k, int) or isinstance(k, bool):
        raise TypeError(f'{name_k} must be an int, got {k!r}')
    limit = scores.shape[1] if max_k is None else min(scores.shape[1], max_k)
    if not 1 <= k <= limit:
        raise ValueError(f'{name_k} must be in [1, {limit}], got {k}')


def stable_topk(scores, num_topk):
    """Indices ``[T, num_topk]`` (int64) of the num_topk largest scores per row, by descending score.

    Equal scores are ordered by ascending index: a stable descending sort keeps
    the input order of ties, which is what the kernels' "smaller index wins"
    comparison produces. Order among non-finite scores is not specified.
    """
    _check_scores(scores, num_topk, 'num_topk')
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return order[:, :num_topk].contiguous()


def topk_gate_ref(scores, num_topk):
    """Reference of ``moe.topk_gate``: ``stable_topk`` restricted to finite scores.

    1 <= num_topk <= min(E, 32), as for the kernel (one warp per token).
    Raises ValueError where the kernel would device-assert on non-finite input.
    """
    _check_scores(scores, num_topk, 'num_topk', max_k=_WARP_SIZE)
    if not bool(torch.isfinite(scores).all()):
        raise ValueError('scores must be finite (the topk_gate kernel asserts on NaN/inf)')
    return stable_topk(scores, num_topk)


def _warp_butterfly_sum(w):
    """Lane 0 of a 32-lane xor-butterfly sum, lane k < K holding w[:, k], others 0.

    Every round adds each lane's partner (lane ^ offset) in fp32, exactly like
    ``v += __shfl_xor_sync(mask, v, offset)``; fp32 addition is commutative, so
    only the pairing order matters and it is reproduced here.
    """
    t, k = w.shape
    lanes = w.new_zeros((t, _WARP_SIZE))
    lanes[:, :k] = w
    lane_ids = torch.arange(_WARP_SIZE, device=w.device)
    for offset in _BUTTERFLY_OFFSETS:
        lanes = lanes + lanes[:, lane_ids ^ offset]
    return lanes[:, 0]


def normalize_weight(topk_weights):
    """Normalize each row by its butterfly-ordered sum plus 1e-20.

    topk_weights: fp32 ``[T, K]`` with 1 <= K <= 32.
    Returns ``(denominator [T], topk_weights / denominator[:, None])``.
    """
    if not isinstance(topk_weights, torch.Tensor) or topk_weights.dtype != torch.float32:
        raise TypeError('topk_weights must be a torch.float32 tensor')
    if topk_weights.dim() != 2 or not 1 <= topk_weights.shape[1] <= _WARP_SIZE:
        raise ValueError(f'topk_weights must be [T, K] with 1 <= K <= {_WARP_SIZE}, '
                         f'got shape {tuple(topk_weights.shape)}')
    total = _warp_butterfly_sum(topk_weights)
    # Tensor operands on both sides keep the eps an fp32 constant on every device.
    denominator = total + torch.full_like(total, _NORMALIZE_EPS)
    return denominator, topk_weights / denominator[:, None]


# ---------------------------------------------------------------------------------------------
# v1 group-limited router (DeepSeek-V3): top2_sum_gate and its group-selection helper.

_SCORING_FUNCS = ('sigmoid', 'sqrtsoftplus')
_PHYSICAL_HASH = 23333  # dup = (ep_rank + token * 23333) % logical_count[e]  (docs/SPEC.md §2.3)


def topk_sum_and_topk_group_idx(scores, num_group_sum_topk, num_topk_groups):
    """Indices [T, num_topk_groups] (int64) of the best groups, best first, ties to the lower group.

    scores: fp32 [T, G, E/G]; a group's score is its largest score (num_group_sum_topk 1) or the
    fp32 sum of its two largest (num_group_sum_topk 2; the sum of two is order-independent).
    """
    if not isinstance(scores, torch.Tensor) or scores.dtype != torch.float32 or scores.dim() != 3:
        raise TypeError('scores must be a float32 tensor [T, G, E/G]')
    if num_group_sum_topk not in (1, 2) or num_group_sum_topk > scores.shape[2]:
        raise ValueError(f'num_group_sum_topk must be 1 or 2 (and <= experts per group), got {num_group_sum_topk!r}')
    if not 1 <= num_topk_groups <= scores.shape[1]:
        raise ValueError(f'num_topk_groups must be in [1, {scores.shape[1]}], got {num_topk_groups!r}')
    top = torch.topk(scores, num_group_sum_topk, dim=-1).values
    group_scores = top[..., 0] if num_group_sum_topk == 1 else top[..., 0] + top[..., 1]
    return stable_topk(group_scores, num_topk_groups)


def _router_scores(logits, scoring_func):
    """Un-biased scores with the CUDA formulas the kernel uses (and torch's CUDA kernels use)."""
    if scoring_func == 'sigmoid':
        return torch.sigmoid(logits)
    if scoring_func == 'sqrtsoftplus':
        return torch.nn.functional.softplus(logits).sqrt()  # x > 20 ? x : log1p(exp(x)), then sqrt
    raise ValueError(f'scoring_func must be one of {list(_SCORING_FUNCS)}, got {scoring_func!r}')


def _mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    """Keep the experts of this TP rank's EP shards, renumbered locally; others (and -1) become -1."""
    per_gpu = n // num_ep_ranks
    per_dp = per_gpu * num_tp_ranks
    valid = indices >= 0
    keep = valid & ((torch.where(valid, indices, 0) // per_gpu) % num_tp_ranks == tp_rank)
    local = indices - tp_rank * per_gpu
    local = local - torch.where(keep, local, 0) // per_dp * (per_dp - per_gpu)
    return torch.where(keep, local, torch.full_like(indices, -1))


def top2_sum_gate(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
                  routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask=None,
                  fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None):
    """Reference of v1 ``moe.top2_sum_gate``: returns (idx [T, K+S] int64, weights [T, K+S] fp32).

    Per token: s = score(logit) (un-biased), b = s + bias (ranking only). With grouping
    (num_groups > 0), the num_topk_groups groups with the largest top-2 sums of b survive
    (ties to the lower group), the others are masked to -inf. The top-K experts of b
    (stable) follow; rows with fix_routing_mask take unmapped_topk_idx instead (entries
    outside [0, E) become -1 with weight 0). weight_k = s_k / (1e-20 + s_0 + s_1 + ...) * rsf, summed in
    this sequential order. Shared slots K..K+S-1 get experts E.. with weight 1. Then the
    optional logical->physical map, then expert-TP masking with
    experts_per_rank = (E + D - 1) // num_ep_ranks. Masked tokens: idx -1, weight 0,
    unmapped -1. ``unmapped_topk_idx`` ([T, K] int64) is written in place with the
    logical routed experts of every active row.
    """
    t, e = logits.shape
    s_count = num_shared_experts if use_shared_as_routed else 0
    active = torch.ones(t, dtype=torch.bool, device=logits.device) if mask is None else mask.bool()
    if not bool((torch.isfinite(logits).all(1) | ~active).all()) or not bool(torch.isfinite(bias).all()):
        raise ValueError('logits of active tokens and bias must be finite (the kernel reports NaN/inf)')
    scores = _router_scores(logits, scoring_func)
    biased = scores + bias[None, :]
    if num_groups and num_groups != num_topk_groups:
        per_group = e // num_groups
        top_groups = topk_sum_and_topk_group_idx(biased.view(t, num_groups, per_group), 2, num_topk_groups)
        keep = torch.zeros((t, num_groups), dtype=torch.bool, device=logits.device)
        keep.scatter_(1, top_groups, True)
        keep = keep[:, :, None].expand(t, num_groups, per_group).reshape(t, e)
        biased = biased.masked_fill(~keep, float('-inf'))
    idx = torch.sort(biased, dim=1, descending=True, stable=True).indices[:, :num_topk]
    if fix_routing_mask is not None and unmapped_topk_idx is not None:
        given = unmapped_topk_idx
        given = torch.where((given < 0) | (given >= e), -1, given)  # anything outside [0, E) counts as none
        idx = torch.where(fix_routing_mask.bool()[:, None], given, idx)
    picked = torch.where(idx >= 0, scores.gather(1, idx.clamp(min=0)), torch.zeros((), device=logits.device))
    denominator = torch.full((t,), _NORMALIZE_EPS, dtype=torch.float32, device=logits.device)
    for k in range(num_topk):  # sequential, from 1e-20
        denominator = denominator + picked[:, k]
    weights = picked / denominator[:, None] * torch.tensor(routed_scaling_factor, dtype=torch.float32)
    if unmapped_topk_idx is not None:
        unmapped_topk_idx.copy_(torch.where(active[:, None], idx, -1))
    if s_count:
        shared = torch.arange(e, e + s_count, device=logits.device).expand(t, s_count)
        idx = torch.cat([idx, shared], dim=1)
        weights = torch.cat([weights, torch.ones((t, s_count), dtype=torch.float32, device=logits.device)], dim=1)
    extra = 0
    if to_physical_map is not None and logical_count is not None:
        extra = to_physical_map.shape[1] - 1
        valid = idx >= 0
        logical = idx.clamp(min=0)
        token = torch.arange(t, device=logits.device, dtype=torch.int64)[:, None]
        dup = (ep_rank + token * _PHYSICAL_HASH) % logical_count.long()[logical]
        idx = torch.where(valid, to_physical_map.long()[logical, dup], -1)
    idx = _mask_indices_by_tp(idx, e + extra, num_ep_ranks, tp_rank, num_tp_ranks)
    idx = torch.where(active[:, None], idx, -1)
    weights = torch.where(active[:, None], weights, torch.zeros((), device=logits.device))
    return idx.contiguous(), weights.contiguous()
