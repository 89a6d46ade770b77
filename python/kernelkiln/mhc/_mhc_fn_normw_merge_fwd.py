"""mhc_fn_normw_merge_fwd (tile_kernels 2.1 ``mhc.mhc_fn_normw_merge_fwd``): the mix weights with the RMS-norm
weight folded in, ``out_fn = fn · normw``.

Spec: kernelkiln_contract.mhc_mixes.MHC_FN_NORMW_MERGE_FWD (docs/spec/mhc_mixes.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, on_device
from kernelkiln_contract.mhc_mixes import MERGE_VEC
from kernelkiln_contract.mhc_mixes import MHC_FN_NORMW_MERGE_FWD as CONTRACT

__all__ = ["mhc_fn_normw_merge_fwd"]
MAX_ROWS = 65535  # the forward's grid y


def check_fn_normw(fn, normw):
    """(rows, cols) of fn ``[rows, cols]`` fp32 with cols a multiple of 4, and normw ``[cols]``."""
    checks.tensor("fn", fn, (torch.float32,), ndim=2)
    rows, cols = fn.shape
    if cols % MERGE_VEC:
        raise ValueError(f"fn.shape[1] must be a multiple of {MERGE_VEC} (in mHC it is mhc_mult·hidden), got {cols}")
    checks.contiguous("fn", fn)
    f32_tensor("normw", normw, (cols,), "[fn.shape[1]]", "fn", fn)
    return rows, cols


def _check(fn, normw, out_fn, device=True):
    rows, cols = check_fn_normw(fn, normw)
    if rows > MAX_ROWS:
        raise ValueError(f"fn.shape[0] must be <= {MAX_ROWS}, got {rows}")
    f32_tensor("out_fn", out_fn, (rows, cols), "fn's shape", "fn", fn)
    if device:
        on_device(("fn", fn, 16), ("normw", normw, 16), ("out_fn", out_fn, 16))
    return rows, cols


def _forward(fn, normw, out_fn):
    rows, cols = _check(fn, normw, out_fn)
    if rows and cols:
        launch(CONTRACT, CONTRACT.key(dtype="float32"), fn.device, fn=fn.data_ptr(), normw=normw.data_ptr(),
               out_fn=out_fn.data_ptr(), num_rows=rows, num_col_vecs=cols // MERGE_VEC)


@library_op("mhc_fn_normw_merge_fwd", mutates_args=("out_fn",))
def _op(fn: torch.Tensor, normw: torch.Tensor, out_fn: torch.Tensor) -> None:
    _forward(fn, normw, out_fn)


@_op.register_fake
def _fake(fn, normw, out_fn):
    _check(fn, normw, out_fn, device=False)


def mhc_fn_normw_merge_fwd(fn, normw, out_fn):
    """``out_fn = fn · normw`` (normw ``[cols]`` broadcast over the rows of fn ``[rows, cols]``, all fp32) into the
    preallocated ``out_fn``; returns None. As tile_kernels 2.1 ``mhc.mhc_fn_normw_merge_fwd`` (same bits)."""
    if torch.compiler.is_compiling():
        return _op(fn, normw, out_fn)
    return _forward(fn, normw, out_fn)
