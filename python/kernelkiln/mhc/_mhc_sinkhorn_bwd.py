"""mhc_sinkhorn_bwd (tile_kernels 2.1 ``mhc.mhc_sinkhorn_bwd``): the gradient of mhc_sinkhorn_fwd with respect to its
logits, into a preallocated tensor.

Spec: kernelkiln_contract.mhc_sinkhorn.MHC_SINKHORN_BWD (docs/spec/mhc_sinkhorn.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_sinkhorn_fwd import check_matrices, check_repeat_eps
from kernelkiln_contract.mhc_sinkhorn import MHC_SINKHORN_BWD as CONTRACT

__all__ = ["mhc_sinkhorn_bwd"]


def _check(grad_output, x, grad_input, repeat, eps):
    n, m = check_matrices((("grad_output", grad_output), ("x", x), ("grad_input", grad_input)))
    check_repeat_eps(repeat, eps)
    return n, m


def _backward(grad_output, x, grad_input, repeat, eps):
    n, m = _check(grad_output, x, grad_input, repeat, eps)
    checks.cuda("grad_output", grad_output)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), grad_output.device, grad_output=grad_output.data_ptr(),
               x=x.data_ptr(), grad_input=grad_input.data_ptr(), num_tokens=n, repeat=repeat, eps=float(eps))


@library_op("mhc_sinkhorn_bwd", mutates_args=("grad_input",))
def _mhc_sinkhorn_bwd_op(grad_output: torch.Tensor, x: torch.Tensor, grad_input: torch.Tensor, repeat: int,
                         eps: float) -> None:
    _backward(grad_output, x, grad_input, repeat, eps)


@_mhc_sinkhorn_bwd_op.register_fake
def _mhc_sinkhorn_bwd_fake(grad_output, x, grad_input, repeat, eps):
    _check(grad_output, x, grad_input, repeat, eps)


def mhc_sinkhorn_bwd(grad_output, x, grad_input, repeat: int, eps: float):
    """The gradient of ``mhc_sinkhorn_fwd(x, ·, repeat, eps)`` with respect to the logits ``x`` (the forward's INPUT,
    ``[n, m, m]`` fp32), from ``grad_output``, written into the preallocated ``grad_input`` (may be grad_output
    itself); returns None. The forward is recomputed. As tile_kernels 2.1 ``mhc.mhc_sinkhorn_bwd``; repeat >= 1."""
    if torch.compiler.is_compiling():
        return _mhc_sinkhorn_bwd_op(grad_output, x, grad_input, repeat, eps)
    return _backward(grad_output, x, grad_input, repeat, eps)
