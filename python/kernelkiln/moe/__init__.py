"""MoE routing operators (tile_kernels.moe compatible).

The public functions and their torch.library ops are declared in ``_api``; each op's work lives in its own module
(``_topk``, ``_normalize``, ``_top2_sum``, ``_topk_sum``, ``_router21``, ``_aux``, ``_fused``). get_fused_mapping
and friends (v1 dispatch/combine) are plain Python entry points: get_fused_mapping may return a host list.
"""
from kernelkiln.moe._api import (  # noqa: F401
    aux_fi,
    group_count,
    inplace_unique_group_indices,
    mask_indices_by_tp,
    moe_topk_gate,
    moe_topk_gate_backward,
    moe_topk_gate_forward,
    normalize_weight,
    top2_sum_gate,
    topk_gate,
    topk_sum_and_topk_group_idx,
)
from kernelkiln.moe._fused import expand_to_fused, expand_to_fused_with_sf, get_fused_mapping, reduce_fused  # noqa: F401
from kernelkiln.moe._topk import NonFiniteScoresError, check_errors, set_sync_checks  # noqa: F401

__all__ = [
    # 2.1
    "topk_gate", "normalize_weight", "moe_topk_gate_forward", "moe_topk_gate", "moe_topk_gate_backward",
    # v1 router, group ranking, dispatch/combine and auxiliary ops
    "top2_sum_gate", "topk_sum_and_topk_group_idx", "get_fused_mapping", "expand_to_fused", "expand_to_fused_with_sf",
    "reduce_fused", "mask_indices_by_tp", "group_count", "aux_fi", "inplace_unique_group_indices",
    # errors
    "NonFiniteScoresError", "check_errors", "set_sync_checks",
]
