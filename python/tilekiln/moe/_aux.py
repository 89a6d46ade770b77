"""v1 auxiliary MoE ops: mask_indices_by_tp, group_count, aux_fi, inplace_unique_group_indices (OPERATORS.md §3.1).

Composed of torch ops on the input's device (no TileKiln kernel): each is a single memory-bound pass whose
result is integer-exact (histograms via bincount, a deterministic integer sum; aux_fi divides exact
integer-valued fp32 terms once), so they are deterministic and independent of the SM count, unlike the
peer's fp32 atomics. Argument checks follow the v1 constraints.
"""
import torch

from tilekiln._runtime import checks
from tilekiln.moe._top2_sum import _int
from tilekiln.torch import moe_router as ref

_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _idx(name, v, dtypes=(torch.int64,)):
    checks.tensor(name, v, dtypes, ndim=2)


def mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    _idx("indices", indices, _INT_DTYPES)
    _int("num_ep_ranks", num_ep_ranks, 1)
    _int("n", n, num_ep_ranks)
    _int("num_tp_ranks", num_tp_ranks, 1)
    _int("tp_rank", tp_rank, 0, num_tp_ranks - 1)
    return ref.mask_indices_by_tp(indices, n, num_ep_ranks, tp_rank, num_tp_ranks)


def group_count(group_idx, num_groups):
    _idx("group_idx", group_idx)
    _int("num_groups", num_groups, 1)
    return ref.group_count(group_idx, num_groups)


def aux_fi(topk_idx, num_experts, num_aux_topk):
    _idx("topk_idx", topk_idx)
    _int("num_experts", num_experts, 1)
    _int("num_aux_topk", num_aux_topk, 1)
    return ref.aux_fi(topk_idx, num_experts, num_aux_topk)


def inplace_unique_group_indices(group_indices, num_groups):
    _idx("group_indices", group_indices)
    _int("num_groups", num_groups, 1, 128)
    ref.inplace_unique_group_indices(group_indices, num_groups)
