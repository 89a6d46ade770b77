"""Bit-exact PyTorch references for MoE routing helpers (OPERATORS.md §2.3, §3.1)."""

import torch

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


def stable_topk(scores, k):
    """Indices ``[T, k]`` (int64) of the k largest scores per row, by descending score.

    Equal scores are ordered by ascending index: a stable descending sort keeps
    the input order of ties, which is what the kernels' "smaller index wins"
    comparison produces. Order among non-finite scores is not specified.
    """
    _check_scores(scores, k, 'k')
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return order[:, :k].contiguous()


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
