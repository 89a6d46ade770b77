"""fused_weight (tile_kernels 2.1 ``engram.fused_weight``): the gate's exact fp32 weight product.

Spec: kernelkiln_contract.engram.FUSED_WEIGHT (docs/spec/engram.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.engram import ENGRAM_HIDDEN_ALIGN
from kernelkiln_contract.engram import FUSED_WEIGHT as CONTRACT

__all__ = ["fused_weight"]


def check_weights(weight_hidden, weight_embed, names=("weight_hidden", "weight_embed")):
    """(hc, H) of the gate's two bf16 weights; raises naming the argument. Shared with grad_w_reduce."""
    for name, w in zip(names, (weight_hidden, weight_embed)):
        checks.tensor(name, w, (torch.bfloat16,), ndim=2)
        checks.contiguous(name, w)
    hc, h = weight_hidden.shape
    if tuple(weight_embed.shape) != (hc, h):
        raise ValueError(f"{names[1]} must have {names[0]}'s shape {(hc, h)}, got {tuple(weight_embed.shape)}")
    if h % ENGRAM_HIDDEN_ALIGN or h == 0:
        raise ValueError(f"the hidden size ({names[0]}.shape[1]) must be a positive multiple of {ENGRAM_HIDDEN_ALIGN}, "
                         f"got {h}")
    checks.same_device(names[1], weight_embed, names[0], weight_hidden)
    return hc, h


def _fused(weight_hidden, weight_embed):
    check_weights(weight_hidden, weight_embed)
    checks.cuda("weight_hidden", weight_hidden)
    out = torch.empty(weight_hidden.shape, dtype=torch.float32, device=weight_hidden.device)
    if out.numel():
        launch(CONTRACT, CONTRACT.key(weight_dtype="bfloat16"), out.device, weight_hidden=weight_hidden.data_ptr(),
               weight_embed=weight_embed.data_ptr(), out=out.data_ptr(), numel=out.numel())
    return out


@library_op("fused_weight")
def _fused_weight_op(weight_hidden: torch.Tensor, weight_embed: torch.Tensor) -> torch.Tensor:
    return _fused(weight_hidden, weight_embed)


@_fused_weight_op.register_fake
def _fused_weight_fake(weight_hidden, weight_embed):
    check_weights(weight_hidden, weight_embed)
    return weight_hidden.new_empty(weight_hidden.shape, dtype=torch.float32)


def fused_weight(weight_hidden, weight_embed):
    """``float(weight_hidden) · float(weight_embed)``, a new ``[hc, H]`` fp32 tensor (exact), from two ``[hc, H]``
    bf16 weights with H a multiple of 256. As tile_kernels 2.1 ``engram.fused_weight``."""
    if torch.compiler.is_compiling():
        return _fused_weight_op(weight_hidden, weight_embed)
    return _fused(weight_hidden, weight_embed)
