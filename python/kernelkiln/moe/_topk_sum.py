"""topk_sum_and_topk_group_idx (tile_kernels v1 signature): best groups of [T, G, E/G] scores -> [T, k] int64."""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.moe import TOPK_SUM_AND_TOPK_GROUP_IDX as CONTRACT

OP = CONTRACT.op
THREADS = 128
MAX_GROUPS = 32  # one lane (at least) per group


def _int(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def check(scores, num_topk_sum, num_topk_groups):
    checks.tensor("scores", scores, (torch.float32,), ndim=3)
    _int("num_topk_sum", num_topk_sum)
    _int("num_topk_groups", num_topk_groups)
    _, g, epg = scores.shape
    if not 1 <= g <= MAX_GROUPS:
        raise ValueError(f"scores.shape[1] (num_groups) must be in 1..{MAX_GROUPS}, got {g}")
    if epg < 1:
        raise ValueError(f"scores.shape[2] (experts per group) must be >= 1, got {epg}")
    if num_topk_sum not in (1, 2) or num_topk_sum > epg:
        raise ValueError(f"num_topk_sum must be 1 or 2 and <= experts per group ({epg}), got {num_topk_sum}")
    if not 1 <= num_topk_groups <= g:
        raise ValueError(f"num_topk_groups must be in 1..{g} (num_groups), got {num_topk_groups}")
    if not scores.is_contiguous():
        raise ValueError(f"scores must be contiguous, got strides {tuple(scores.stride())}")


def topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups):
    """Group indices [T, num_topk_groups], best first, ties to the lower group (reference in kernelkiln.torch)."""
    check(scores, num_topk_sum, num_topk_groups)
    t, g, epg = scores.shape
    out = torch.empty((t, num_topk_groups), dtype=torch.int64, device=scores.device)
    if t == 0:
        return out
    checks.cuda("scores", scores)
    lpg_shift = (MAX_GROUPS // g).bit_length() - 1  # lanes per group: the largest power of two <= 32 / G
    vec4 = int(epg % 4 == 0 and scores.data_ptr() % 16 == 0)  # rows are then 16-byte aligned too
    launch(CONTRACT, CONTRACT.key(threads=THREADS), scores.device,
           scores=scores.data_ptr(), out=out.data_ptr(), num_tokens=t, num_groups=g, experts_per_group=epg,
           num_topk_sum=num_topk_sum, num_topk_groups=num_topk_groups, lpg_shift=lpg_shift, vec4=vec4)
    return out
