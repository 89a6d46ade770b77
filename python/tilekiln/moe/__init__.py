"""MoE routing operators (tile_kernels.moe compatible)."""
import torch

from tilekiln.moe import _topk
from tilekiln.moe._topk import NonFiniteScoresError, check_errors, set_sync_checks  # noqa: F401

__all__ = ["topk_gate", "NonFiniteScoresError", "check_errors", "set_sync_checks"]


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
