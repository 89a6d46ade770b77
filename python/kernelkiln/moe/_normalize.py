"""normalize_weight (tile_kernels 2.1 signature): (denominator [T], normalized [T, K])."""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.moe import NORMALIZE_WEIGHT as CONTRACT

OP = CONTRACT.op
THREADS = 128
MAX_TOPK = 32


def check(topk_weights):
    checks.tensor("topk_weights", topk_weights, (torch.float32,), ndim=2)
    k = topk_weights.shape[1]
    if not 1 <= k <= MAX_TOPK:
        raise ValueError(f"topk_weights.shape[1] (num_topk) must be in 1..{MAX_TOPK}, got {k}")
    if topk_weights.shape[0] > 0 and topk_weights.stride(1) != 1:
        raise ValueError(f"topk_weights must have inner stride 1, got strides {tuple(topk_weights.stride())}")


def normalize_weight(topk_weights):
    """Row sums (butterfly order xor 16..1, + 1e-20) and the rows divided by them."""
    check(topk_weights)
    t, k = topk_weights.shape
    device = topk_weights.device
    denominator = torch.empty((t,), dtype=torch.float32, device=device)
    out = torch.empty((t, k), dtype=torch.float32, device=device)
    if t == 0:
        return denominator, out
    checks.cuda("topk_weights", topk_weights)
    shift = (k - 1).bit_length()  # G = 2**shift lanes per row
    ctas = -(-(t << shift) // THREADS)
    launch(CONTRACT, CONTRACT.key(threads=THREADS), device,
           w=topk_weights.data_ptr(), denominator=denominator.data_ptr(), out=out.data_ptr(), num_tokens=t,
           num_topk=k, w_stride=topk_weights.stride(0), group_shift=shift, num_ctas=ctas)
    return denominator, out
