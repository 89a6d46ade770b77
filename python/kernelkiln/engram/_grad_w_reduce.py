"""grad_w_reduce (tile_kernels 2.1 ``engram.grad_w_reduce``): the gate weights' gradients, accumulated in place.

Spec: kernelkiln_contract.engram.GRAD_W_REDUCE (docs/spec/engram.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.engram._fused_weight import check_weights
from kernelkiln_contract.engram import GRAD_W_REDUCE as CONTRACT

__all__ = ["grad_w_reduce"]
_VEC = 4  # columns per thread (kernels/engram/grad_w_reduce.py)


def _check(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed, device=True):
    hc, h = check_weights(weight_hidden, weight_embed)
    checks.tensor("grad_w_partial", grad_w_partial, (torch.float32,), ndim=3)
    if tuple(grad_w_partial.shape[1:]) != (hc, h):
        raise ValueError(f"grad_w_partial must have shape [P, hc, H] = [P, {hc}, {h}], got "
                         f"{tuple(grad_w_partial.shape)}")
    checks.contiguous("grad_w_partial", grad_w_partial)
    for name, g in (("grad_weight_hidden", grad_weight_hidden), ("grad_weight_embed", grad_weight_embed)):
        checks.tensor(name, g, (torch.float32,), ndim=2)
        if tuple(g.shape) != (hc, h):
            raise ValueError(f"{name} must have the weights' shape {(hc, h)}, got {tuple(g.shape)}")
        checks.contiguous(name, g)
    if device and grad_weight_hidden.numel() and grad_weight_hidden.data_ptr() == grad_weight_embed.data_ptr():
        raise ValueError("grad_weight_hidden and grad_weight_embed must be different tensors (both are accumulated)")
    for name, x in (("grad_w_partial", grad_w_partial), ("weight_embed", weight_embed),
                    ("grad_weight_hidden", grad_weight_hidden), ("grad_weight_embed", grad_weight_embed)):
        checks.same_device(name, x, "weight_hidden", weight_hidden)
    if device:
        checks.cuda("weight_hidden", weight_hidden)
        for name, x in (("grad_w_partial", grad_w_partial), ("grad_weight_hidden", grad_weight_hidden),
                        ("grad_weight_embed", grad_weight_embed)):
            checks.aligned(name, x, 16)
        checks.aligned("weight_hidden", weight_hidden, 8)
        checks.aligned("weight_embed", weight_embed, 8)


def _reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    _check(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed)
    if weight_hidden.numel():
        launch(CONTRACT, CONTRACT.key(weight_dtype="bfloat16"), weight_hidden.device,
               grad_w_partial=grad_w_partial.data_ptr(), weight_hidden=weight_hidden.data_ptr(),
               weight_embed=weight_embed.data_ptr(), grad_weight_hidden=grad_weight_hidden.data_ptr(),
               grad_weight_embed=grad_weight_embed.data_ptr(), num_partials=grad_w_partial.shape[0],
               numel_vecs=weight_hidden.numel() // _VEC)


@library_op("grad_w_reduce", mutates_args=("grad_weight_hidden", "grad_weight_embed"))
def _grad_w_reduce_op(grad_w_partial: torch.Tensor, weight_hidden: torch.Tensor, weight_embed: torch.Tensor,
                      grad_weight_hidden: torch.Tensor, grad_weight_embed: torch.Tensor) -> None:
    _reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed)


@_grad_w_reduce_op.register_fake
def _grad_w_reduce_fake(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    _check(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed, device=False)


def grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    """Sum the gate backward's partials ``[P, hc, H]`` fp32 in row order and accumulate the product rule into the
    fp32 ``grad_weight_hidden`` / ``grad_weight_embed`` in place; returns None. As tile_kernels 2.1
    ``engram.grad_w_reduce``."""
    if torch.compiler.is_compiling():
        return _grad_w_reduce_op(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed)
    return _reduce(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed)
