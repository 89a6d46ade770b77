"""The MoE family's public functions and their torch.library ops (one declaration each: kernelkiln._ops.library).

Each op's work lives in its own module (``_topk``, ``_normalize``, ``_top2_sum``, ``_topk_sum``, ``_router21``,
``_aux``); the functions here validate nothing themselves: under ``torch.compile`` they call the registered op,
otherwise the module's function.
"""
import torch

from kernelkiln._ops.library import library_op
from kernelkiln.moe import _aux, _normalize, _router21, _top2_sum, _topk, _topk_sum


def topk_gate(scores, num_topk):
    """Top-k expert indices per token (tile_kernels 2.1 ``moe.topk_gate``): [T, E] fp32 -> [T, K] int64."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.topk_gate(scores, num_topk)
    return _topk.topk_gate(scores, num_topk)


def normalize_weight(topk_weights):
    """(denominator [T], topk_weights / denominator) with the router's butterfly sum + 1e-20 (tile_kernels 2.1)."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.normalize_weight(topk_weights)
    return _normalize.normalize_weight(topk_weights)


def top2_sum_gate(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
                  routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask=None,
                  fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None):
    """v1 DeepSeek-V3 group-limited router -> (topk_idx [T, K+S] int64, topk_weights [T, K+S] fp32).

    Same signature and results as tile_kernels v1 ``moe.top2_sum_gate`` for sigmoid and sqrtsoftplus
    scoring (reference: ``kernelkiln.torch.top2_sum_gate``). ``unmapped_topk_idx`` is written in place.
    """
    args = (logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
            routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask,
            fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx)
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.top2_sum_gate(*args)
    return _top2_sum.top2_sum_gate(*args)


def moe_topk_gate_forward(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank,
                          scoring_func="sqrtsoftplus", mask=None, bias=None, image_bias=None, image_token_mask=None,
                          fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None,
                          force_random=None, out=None, scores=None):
    """tile_kernels 2.1 sqrt-softplus router -> (topk_idx [T, K+S] int64, topk_weights [T, K+S] fp32).

    Reference: ``kernelkiln.torch.moe_topk_gate_forward``. ``unmapped_topk_idx`` and ``scores`` are filled in
    place; ``out`` = (topk_idx, topk_weights) receives the result when given.
    """
    args = (logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor, ep_rank, scoring_func,
            mask, bias, image_bias, image_token_mask, fix_routing_mask, to_physical_map, logical_count,
            unmapped_topk_idx, force_random)
    if out is None and torch.compiler.is_compiling():
        return torch.ops.kernelkiln.moe_topk_gate_forward(*args, scores=scores)
    return _router21.moe_topk_gate_forward(*args, out=out, scores=scores)


def moe_topk_gate(*args, **kwargs):
    """Legacy alias of ``moe_topk_gate_forward`` (tile_kernels 2.1)."""
    return moe_topk_gate_forward(*args, **kwargs)


def moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor,
                           scoring_func="sqrtsoftplus", mask=None, grad_scores_sum=None, out=None):
    """Gradient of the 2.1 router w.r.t. the logits -> grad_logits [T, E] fp32 (route + sequence-aux terms)."""
    args = (scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor, scoring_func, mask,
            grad_scores_sum)
    if out is None and torch.compiler.is_compiling():
        return torch.ops.kernelkiln.moe_topk_gate_backward(*args)
    return _router21.moe_topk_gate_backward(*args, out=out)


# v1 group ranking of a grouped score row (moe/_topk_sum.py).


def topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups):
    """Indices [T, num_topk_groups] int64 of the best groups of scores [T, G, E/G] fp32 (tile_kernels v1).

    Group score = the top-1 (num_topk_sum 1) or the fp32 sum of the top-2 (2) scores of the group; best
    first, ties to the lower group index. Reference: ``kernelkiln.torch.topk_sum_and_topk_group_idx``.
    """
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups)
    return _topk_sum.topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups)


# v1 auxiliary ops (moe/_aux.py): one kernel each, graph-capturable.


def group_count(group_idx, num_groups):
    """int32 histogram [num_groups] of the ids of group_idx ([T, K] int64); -1 and ids >= num_groups ignored."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.group_count(group_idx, num_groups)
    return _aux.group_count(group_idx, num_groups)


def aux_fi(topk_idx, num_experts, num_aux_topk):
    """Load-balance frequencies [E] fp32: count_e * E / (T * num_aux_topk), -1 ignored (tile_kernels v1)."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.aux_fi(topk_idx, num_experts, num_aux_topk)
    return _aux.aux_fi(topk_idx, num_experts, num_aux_topk)


def mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    """This TP rank's experts of indices ([T, K], any int dtype), renumbered locally; the others -1 (v1)."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks)
    return _aux.mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks)


def inplace_unique_group_indices(group_indices, num_groups):
    """In place: repeats of a group id within a row ([T, K] int64), after its first occurrence, become -1 (v1)."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.inplace_unique_group_indices(group_indices, num_groups)
    return _aux.inplace_unique_group_indices(group_indices, num_groups)


# ---- the torch.library ops (registered on the first lookup of one in torch.ops.kernelkiln) ----

@library_op("topk_gate", mutates_args=())
def _topk_gate_op(scores: torch.Tensor, num_topk: int) -> torch.Tensor:
    return _topk.topk_gate(scores, num_topk)


@_topk_gate_op.register_fake
def _topk_gate_op_fake(scores, num_topk):
    return scores.new_empty((scores.shape[0], num_topk), dtype=torch.int64)


@library_op("normalize_weight", mutates_args=())
def _normalize_weight_op(topk_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _normalize.normalize_weight(topk_weights)


@_normalize_weight_op.register_fake
def _normalize_weight_op_fake(topk_weights):
    _normalize.check(topk_weights)
    t, k = topk_weights.shape
    return topk_weights.new_empty((t,)), topk_weights.new_empty((t, k))


@library_op("top2_sum_gate", mutates_args=("unmapped_topk_idx",))
def _top2_sum_gate_op(logits: torch.Tensor, bias: torch.Tensor, num_topk: int, num_topk_groups: int, num_groups: int,
                      use_shared_as_routed: bool, num_shared_experts: int, routed_scaling_factor: float,
                      ep_rank: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int, scoring_func: str,
                      mask: torch.Tensor | None = None, fix_routing_mask: torch.Tensor | None = None,
                      to_physical_map: torch.Tensor | None = None, logical_count: torch.Tensor | None = None,
                      unmapped_topk_idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _top2_sum.top2_sum_gate(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed,
                                   num_shared_experts, routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank,
                                   num_tp_ranks, scoring_func, mask, fix_routing_mask, to_physical_map,
                                   logical_count, unmapped_topk_idx)


@_top2_sum_gate_op.register_fake
def _top2_sum_gate_op_fake(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed,
                           num_shared_experts, routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks,
                           scoring_func, mask=None, fix_routing_mask=None, to_physical_map=None, logical_count=None,
                           unmapped_topk_idx=None):
    t, _, s, _ = _top2_sum.check(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed,
                                 num_shared_experts, routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank,
                                 num_tp_ranks, scoring_func, mask, fix_routing_mask, to_physical_map, logical_count,
                                 unmapped_topk_idx)
    return (logits.new_empty((t, num_topk + s), dtype=torch.int64),
            logits.new_empty((t, num_topk + s), dtype=torch.float32))


@library_op("moe_topk_gate_forward", mutates_args=("unmapped_topk_idx", "scores"))
def _moe_topk_gate_forward_op(logits: torch.Tensor, num_topk: int, use_shared_as_routed: bool,
                              num_shared_experts: int, routed_scaling_factor: float, ep_rank: int,
                              scoring_func: str = "sqrtsoftplus", mask: torch.Tensor | None = None,
                              bias: torch.Tensor | None = None, image_bias: torch.Tensor | None = None,
                              image_token_mask: torch.Tensor | None = None,
                              fix_routing_mask: torch.Tensor | None = None,
                              to_physical_map: torch.Tensor | None = None, logical_count: torch.Tensor | None = None,
                              unmapped_topk_idx: torch.Tensor | None = None, force_random: torch.Tensor | None = None,
                              scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    return _router21.moe_topk_gate_forward(logits, num_topk, use_shared_as_routed, num_shared_experts,
                                           routed_scaling_factor, ep_rank, scoring_func, mask, bias, image_bias,
                                           image_token_mask, fix_routing_mask, to_physical_map, logical_count,
                                           unmapped_topk_idx, force_random, None, scores)


@_moe_topk_gate_forward_op.register_fake
def _moe_topk_gate_forward_op_fake(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor,
                                   ep_rank, scoring_func="sqrtsoftplus", mask=None, bias=None, image_bias=None,
                                   image_token_mask=None, fix_routing_mask=None, to_physical_map=None,
                                   logical_count=None, unmapped_topk_idx=None, force_random=None, scores=None):
    t, _, s, _ = _router21.check(logits, num_topk, use_shared_as_routed, num_shared_experts, routed_scaling_factor,
                                 ep_rank, scoring_func, mask, bias, image_bias, image_token_mask, fix_routing_mask,
                                 to_physical_map, logical_count, unmapped_topk_idx, force_random, None, scores)
    return (logits.new_empty((t, num_topk + s), dtype=torch.int64),
            logits.new_empty((t, num_topk + s), dtype=torch.float32))


@library_op("moe_topk_gate_backward", mutates_args=())
def _moe_topk_gate_backward_op(scores: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                               grad_topk_weights: torch.Tensor, routed_scaling_factor: float,
                               scoring_func: str = "sqrtsoftplus", mask: torch.Tensor | None = None,
                               grad_scores_sum: torch.Tensor | None = None) -> torch.Tensor:
    return _router21.moe_topk_gate_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor,
                                            scoring_func, mask, grad_scores_sum)


@_moe_topk_gate_backward_op.register_fake
def _moe_topk_gate_backward_op_fake(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor,
                                    scoring_func="sqrtsoftplus", mask=None, grad_scores_sum=None):
    _router21.check_backward(scores, topk_idx, topk_weights, grad_topk_weights, routed_scaling_factor, scoring_func,
                             mask, grad_scores_sum, None)
    return torch.empty_like(scores)

# v1 group ranking (moe/_topk_sum.py)


@library_op("topk_sum_and_topk_group_idx", mutates_args=())
def _topk_sum_and_topk_group_idx_op(scores: torch.Tensor, num_topk_sum: int, num_topk_groups: int) -> torch.Tensor:
    return _topk_sum.topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups)


@_topk_sum_and_topk_group_idx_op.register_fake
def _topk_sum_and_topk_group_idx_op_fake(scores, num_topk_sum, num_topk_groups):
    _topk_sum.check(scores, num_topk_sum, num_topk_groups)
    return scores.new_empty((scores.shape[0], num_topk_groups), dtype=torch.int64)

# v1 auxiliary ops (moe/_aux.py)


@library_op("group_count", mutates_args=())
def _group_count_op(group_idx: torch.Tensor, num_groups: int) -> torch.Tensor:
    return _aux.group_count(group_idx, num_groups)


@_group_count_op.register_fake
def _group_count_op_fake(group_idx, num_groups):
    _aux.check_ids("group_idx", group_idx)
    return group_idx.new_empty((num_groups,), dtype=torch.int32)


@library_op("aux_fi", mutates_args=())
def _aux_fi_op(topk_idx: torch.Tensor, num_experts: int, num_aux_topk: int) -> torch.Tensor:
    return _aux.aux_fi(topk_idx, num_experts, num_aux_topk)


@_aux_fi_op.register_fake
def _aux_fi_op_fake(topk_idx, num_experts, num_aux_topk):
    _aux.check_ids("topk_idx", topk_idx)
    return topk_idx.new_empty((num_experts,), dtype=torch.float32)


@library_op("mask_indices_by_tp", mutates_args=())
def _mask_indices_by_tp_op(indices: torch.Tensor, n: int, num_ep_ranks: int, tp_rank: int,
                           num_tp_ranks: int) -> torch.Tensor:
    return _aux.mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks)


@_mask_indices_by_tp_op.register_fake
def _mask_indices_by_tp_op_fake(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    _aux.check_ids("indices", indices, _aux.INT_DTYPES)
    return torch.empty_like(indices, memory_format=torch.contiguous_format)


@library_op("inplace_unique_group_indices", mutates_args=("group_indices",))
def _inplace_unique_group_indices_op(group_indices: torch.Tensor, num_groups: int) -> None:
    _aux.inplace_unique_group_indices(group_indices, num_groups)


@_inplace_unique_group_indices_op.register_fake
def _inplace_unique_group_indices_op_fake(group_indices, num_groups):
    return None
