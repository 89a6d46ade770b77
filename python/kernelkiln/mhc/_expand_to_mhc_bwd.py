"""expand_to_mhc_bwd (tile_kernels 2.1 ``mhc.expand_to_mhc_bwd``): the streams' gradients summed in stream order.

Spec: kernelkiln_contract.mhc_streams.EXPAND_TO_MHC_BWD (docs/spec/mhc_streams.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._expand_to_mhc_fwd import check_hidden, check_mult, check_size
from kernelkiln_contract.mhc_streams import EXPAND_TO_MHC_BWD as CONTRACT
from kernelkiln_contract.mhc_streams import STREAM_VEC

__all__ = ["expand_to_mhc_bwd"]


def _check(o_grad, x_grad, device=True):
    checks.tensor("o_grad", o_grad, (torch.bfloat16,), ndim=3)
    checks.tensor("x_grad", x_grad, (torch.bfloat16,), ndim=2)
    n, m, h = o_grad.shape
    check_mult("o_grad.shape[1]", m)
    if tuple(x_grad.shape) != (n, h):
        raise ValueError(f"x_grad must have shape [n, H] = [{n}, {h}], got {tuple(x_grad.shape)}")
    check_hidden("o_grad.shape[2]", h)
    check_size("o_grad", n, h)
    checks.contiguous("o_grad", o_grad)
    checks.contiguous("x_grad", x_grad)
    checks.same_device("x_grad", x_grad, "o_grad", o_grad)
    if device:
        checks.cuda("o_grad", o_grad)
    return n, m, h


def _expand_bwd(o_grad, x_grad):
    n, m, h = _check(o_grad, x_grad)
    if n and h:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), o_grad.device, o_grad=o_grad.data_ptr(), x_grad=x_grad.data_ptr(),
               num_vecs=n * h // STREAM_VEC, hidden_vecs=h // STREAM_VEC)


@library_op("expand_to_mhc_bwd", mutates_args=("x_grad",))
def _expand_to_mhc_bwd_op(o_grad: torch.Tensor, x_grad: torch.Tensor) -> None:
    _expand_bwd(o_grad, x_grad)


@_expand_to_mhc_bwd_op.register_fake
def _expand_to_mhc_bwd_fake(o_grad, x_grad):
    _check(o_grad, x_grad, device=False)


def expand_to_mhc_bwd(o_grad, x_grad):
    """Overwrite ``x_grad`` ``[n, H]`` bf16 with the sum over the m streams of ``o_grad`` ``[n, m, H]`` bf16 (fp32,
    in stream order, one rounding); returns None. As tile_kernels 2.1 ``mhc.expand_to_mhc_bwd``."""
    if torch.compiler.is_compiling():
        return _expand_to_mhc_bwd_op(o_grad, x_grad)
    return _expand_bwd(o_grad, x_grad)
