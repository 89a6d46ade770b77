"""MoE routing operators (tile_kernels.moe compatible)."""
import torch

from tilekiln.moe import _normalize, _top2_sum, _topk
from tilekiln.moe._topk import NonFiniteScoresError, check_errors, set_sync_checks  # noqa: F401

__all__ = ["topk_gate", "NonFiniteScoresError", "check_errors", "set_sync_checks"]
__all__ += ["normalize_weight", "top2_sum_gate"]
__all__ += ["get_fused_mapping", "expand_to_fused", "expand_to_fused_with_sf", "reduce_fused"]

# v1 expert-major dispatch/combine (plain Python entry points: get_fused_mapping returns a host list).
from tilekiln.moe._fused import (  # noqa: E402
    expand_to_fused,
    expand_to_fused_with_sf,
    get_fused_mapping,
    reduce_fused,
)


@torch.library.custom_op("tilekiln::topk_gate", mutates_args=(), device_types="cuda")
def _topk_gate_op(scores: torch.Tensor, num_topk: int) -> torch.Tensor:
    return _topk.topk_gate(scores, num_topk)


@_topk_gate_op.register_fake
def _(scores, num_topk):
    return scores.new_empty((scores.shape[0], num_topk), dtype=torch.int64)


def topk_gate(scores, num_topk):
    """Top-k expert indices per token (tile_kernels 2.1 ``moe.topk_gate``): [T, E] fp32 -> [T, K] int64."""
    if torch.compiler.is_compiling():
        return torch.ops.tilekiln.topk_gate(scores, num_topk)
    return _topk.topk_gate(scores, num_topk)


@torch.library.custom_op("tilekiln::normalize_weight", mutates_args=(), device_types="cuda")
def _normalize_weight_op(topk_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _normalize.normalize_weight(topk_weights)


@_normalize_weight_op.register_fake
def _(topk_weights):
    _normalize.check(topk_weights)
    t, k = topk_weights.shape
    return topk_weights.new_empty((t,)), topk_weights.new_empty((t, k))


def normalize_weight(topk_weights):
    """(denominator [T], topk_weights / denominator) with the router's butterfly sum + 1e-20 (tile_kernels 2.1)."""
    if torch.compiler.is_compiling():
        return torch.ops.tilekiln.normalize_weight(topk_weights)
    return _normalize.normalize_weight(topk_weights)


@torch.library.custom_op("tilekiln::top2_sum_gate", mutates_args=("unmapped_topk_idx",), device_types="cuda")
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
def _(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
      routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask=None,
      fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None):
    t, _, s, _ = _top2_sum.check(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed,
                                 num_shared_experts, routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank,
                                 num_tp_ranks, scoring_func, mask, fix_routing_mask, to_physical_map, logical_count,
                                 unmapped_topk_idx)
    return (logits.new_empty((t, num_topk + s), dtype=torch.int64),
            logits.new_empty((t, num_topk + s), dtype=torch.float32))


def top2_sum_gate(logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
                  routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask=None,
                  fix_routing_mask=None, to_physical_map=None, logical_count=None, unmapped_topk_idx=None):
    """v1 DeepSeek-V3 group-limited router -> (topk_idx [T, K+S] int64, topk_weights [T, K+S] fp32).

    Same signature and results as tile_kernels v1 ``moe.top2_sum_gate`` for sigmoid and sqrtsoftplus
    scoring (reference: ``tilekiln.torch.top2_sum_gate``). ``unmapped_topk_idx`` is written in place.
    """
    args = (logits, bias, num_topk, num_topk_groups, num_groups, use_shared_as_routed, num_shared_experts,
            routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask,
            fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx)
    if torch.compiler.is_compiling():
        return torch.ops.tilekiln.top2_sum_gate(*args)
    return _top2_sum.top2_sum_gate(*args)
