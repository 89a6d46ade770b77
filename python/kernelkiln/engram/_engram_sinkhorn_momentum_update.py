"""engram_sinkhorn_momentum_update (tile_kernels 2.1 ``engram.engram_sinkhorn_momentum_update``): the momentum buffer
updated in place and the fp32 input of the Sinkhorn normalization.

Spec: kernelkiln_contract.engram_sinkhorn.ENGRAM_SINKHORN_MOMENTUM_UPDATE (docs/spec/). Reference:
``kernelkiln.torch.engram_sinkhorn_momentum_update_ref``, bitwise.
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.engram_sinkhorn import ENGRAM_SINKHORN_MOMENTUM_UPDATE as CONTRACT
from kernelkiln_contract.engram_sinkhorn import SINKHORN_ROW

__all__ = ["engram_sinkhorn_momentum_update"]
_DTYPES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_VEC = 8  # elements per thread (kernels/engram/engram_sinkhorn_momentum_update.py)


def _check(grad, momentum_buffer, beta1, nesterov, device=True):
    checks.tensor("grad", grad, tuple(_DTYPES))
    checks.tensor("momentum_buffer", momentum_buffer, tuple(_DTYPES))
    checks.float_arg("beta1", beta1)
    checks.flag("nesterov", nesterov)
    if grad.numel() != momentum_buffer.numel():
        raise ValueError(f"grad and momentum_buffer must have the same number of elements, got {grad.numel()} "
                         f"(shape {tuple(grad.shape)}) and {momentum_buffer.numel()} "
                         f"(shape {tuple(momentum_buffer.shape)})")
    if grad.numel() % SINKHORN_ROW:
        raise ValueError(f"grad.numel() must be a multiple of {SINKHORN_ROW}, got {grad.numel()}")
    checks.contiguous("grad", grad)
    checks.contiguous("momentum_buffer", momentum_buffer)
    checks.same_device("momentum_buffer", momentum_buffer, "grad", grad)
    if device and grad.numel():
        checks.cuda("grad", grad)
        checks.aligned("grad", grad, 16)
        checks.aligned("momentum_buffer", momentum_buffer, 16)


def _update(grad, momentum_buffer, beta1, nesterov):
    _check(grad, momentum_buffer, beta1, nesterov)
    out = torch.empty_like(momentum_buffer, dtype=torch.float32, memory_format=torch.contiguous_format)
    n = grad.numel()
    if n:
        values = CONTRACT.key(grad_dtype=_DTYPES[grad.dtype], momentum_dtype=_DTYPES[momentum_buffer.dtype],
                              nesterov=nesterov)
        # both fp32 constants are the roundings of the peer's Python doubles beta1 and 1.0 - beta1
        launch(CONTRACT, values, grad.device, grad=grad.data_ptr(), momentum_buffer=momentum_buffer.data_ptr(),
               sinkhorn_input=out.data_ptr(), num_vecs=n // _VEC, beta1=float(beta1),
               one_minus_beta1=1.0 - float(beta1))
    return out


@library_op("engram_sinkhorn_momentum_update", mutates_args=("momentum_buffer",))
def _momentum_update_op(grad: torch.Tensor, momentum_buffer: torch.Tensor, beta1: float,
                        nesterov: bool) -> torch.Tensor:
    return _update(grad, momentum_buffer, beta1, nesterov)


@_momentum_update_op.register_fake
def _momentum_update_fake(grad, momentum_buffer, beta1, nesterov):
    _check(grad, momentum_buffer, beta1, nesterov, device=False)
    return torch.empty_like(momentum_buffer, dtype=torch.float32, memory_format=torch.contiguous_format)


def engram_sinkhorn_momentum_update(grad, momentum_buffer, beta1, nesterov=True):
    """Update ``momentum_buffer`` in place (``m = fma(m, beta1, (1 - beta1) * grad)``, rounded to its dtype) and
    return the fp32 Sinkhorn input of its shape: the Nesterov lookahead ``fma(grad, 1 - beta1, beta1 * m)`` or,
    with ``nesterov=False``, the fp32 ``m`` itself. grad and momentum_buffer: bf16 or fp32 each, contiguous, the
    same numel, a multiple of 256. As tile_kernels 2.1 ``engram.engram_sinkhorn_momentum_update``."""
    if torch.compiler.is_compiling():
        return _momentum_update_op(grad, momentum_buffer, beta1, nesterov)
    return _update(grad, momentum_buffer, beta1, nesterov)
