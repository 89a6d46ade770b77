"""mhc_fn_normw_merge_bwd (tile_kernels 2.1 ``mhc.mhc_fn_normw_merge_bwd``): the gradients of ``fn · normw``,
accumulated into ``fn_grad`` and ``normw_grad``.

Spec: kernelkiln_contract.mhc_mixes.MHC_FN_NORMW_MERGE_BWD (docs/spec/mhc_mixes.md).
"""
import torch

from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_fn_normw_merge_fwd import check_fn_normw
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, on_device
from kernelkiln_contract.mhc_mixes import MERGE_VEC
from kernelkiln_contract.mhc_mixes import MHC_FN_NORMW_MERGE_BWD as CONTRACT

__all__ = ["mhc_fn_normw_merge_bwd"]


def _check(fn, normw, out_fn_grad, fn_grad, normw_grad, device=True):
    rows, cols = check_fn_normw(fn, normw)
    f32_tensor("out_fn_grad", out_fn_grad, (rows, cols), "fn's shape", "fn", fn)
    f32_tensor("fn_grad", fn_grad, (rows, cols), "fn's shape", "fn", fn)
    f32_tensor("normw_grad", normw_grad, (cols,), "normw's shape", "fn", fn)
    if device:
        on_device(("fn", fn, 16), ("normw", normw, 16), ("out_fn_grad", out_fn_grad, 16), ("fn_grad", fn_grad, 16),
                  ("normw_grad", normw_grad, 16))
    return rows, cols


def _backward(fn, normw, out_fn_grad, fn_grad, normw_grad):
    rows, cols = _check(fn, normw, out_fn_grad, fn_grad, normw_grad)
    if cols:  # rows = 0 still adds the (+0) column sums into normw_grad, as the peer
        launch(CONTRACT, CONTRACT.key(dtype="float32"), fn.device, fn=fn.data_ptr(), normw=normw.data_ptr(),
               out_fn_grad=out_fn_grad.data_ptr(), fn_grad=fn_grad.data_ptr(), normw_grad=normw_grad.data_ptr(),
               num_rows=rows, num_col_vecs=cols // MERGE_VEC)


@library_op("mhc_fn_normw_merge_bwd", mutates_args=("fn_grad", "normw_grad"))
def _op(fn: torch.Tensor, normw: torch.Tensor, out_fn_grad: torch.Tensor, fn_grad: torch.Tensor,
        normw_grad: torch.Tensor) -> None:
    _backward(fn, normw, out_fn_grad, fn_grad, normw_grad)


@_op.register_fake
def _fake(fn, normw, out_fn_grad, fn_grad, normw_grad):
    _check(fn, normw, out_fn_grad, fn_grad, normw_grad, device=False)


def mhc_fn_normw_merge_bwd(fn, normw, out_fn_grad, fn_grad, normw_grad):
    """Backward of ``mhc_fn_normw_merge_fwd``, ACCUMULATED in place: ``fn_grad += out_fn_grad · normw`` and
    ``normw_grad += Σ_rows out_fn_grad · fn`` (fp32); returns None. As tile_kernels 2.1
    ``mhc.mhc_fn_normw_merge_bwd`` (same bits: one fma per element, the rows in order)."""
    if torch.compiler.is_compiling():
        return _op(fn, normw, out_fn_grad, fn_grad, normw_grad)
    return _backward(fn, normw, out_fn_grad, fn_grad, normw_grad)
