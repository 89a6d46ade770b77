"""engram_sinkhorn_finalize (tile_kernels 2.1 ``engram.engram_sinkhorn_finalize``): the final row-normalized Engram
Sinkhorn matrix times alpha.

Spec: kernelkiln_contract.engram_sinkhorn.ENGRAM_SINKHORN_FINALIZE (docs/spec/). Reference of the kernel's bits:
``kernelkiln.torch.engram_sinkhorn_finalize_ordered``.
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.engram._engram_sinkhorn_step import check_sinkhorn_matrix
from kernelkiln_contract.engram_sinkhorn import ENGRAM_SINKHORN_FINALIZE as CONTRACT
from kernelkiln_contract.engram_sinkhorn import sinkhorn_threads

__all__ = ["engram_sinkhorn_finalize"]


def _check(matrix, row_scale, col_scale, eps, alpha, out, device=True):
    rows, d = check_sinkhorn_matrix(matrix, row_scale, col_scale, eps, device=False)
    checks.float_arg("alpha", alpha)
    if out is not None:
        checks.tensor("out", out, (torch.float32,), ndim=2)
        if tuple(out.shape) != (rows, d):
            raise ValueError(f"out must have matrix's shape {(rows, d)}, got {tuple(out.shape)}")
        checks.contiguous("out", out)
        checks.same_device("out", out, "matrix", matrix)
    if device:  # after every argument check, so those raise on CPU tensors too
        check_sinkhorn_matrix(matrix, row_scale, col_scale, eps)
        if out is not None:
            checks.aligned("out", out, 16)
    return rows, d


def _finalize(matrix, row_scale, col_scale, eps, alpha, out):
    rows, d = _check(matrix, row_scale, col_scale, eps, alpha, out)
    if out is None:
        out = torch.empty_like(matrix)
    if rows:
        launch(CONTRACT, CONTRACT.key(threads=sinkhorn_threads(d)), matrix.device, matrix=matrix.data_ptr(),
               row_scale=row_scale.data_ptr(), col_scale=col_scale.data_ptr(), out=out.data_ptr(), num_rows=rows,
               head_dim=d, eps=float(eps), alpha=float(alpha))
    return out


@library_op("engram_sinkhorn_finalize")
def _finalize_op(matrix: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor, eps: float,
                 alpha: float) -> torch.Tensor:
    return _finalize(matrix, row_scale, col_scale, eps, alpha, None)


@_finalize_op.register_fake
def _finalize_fake(matrix, row_scale, col_scale, eps, alpha):
    _check(matrix, row_scale, col_scale, eps, alpha, None, device=False)
    return torch.empty_like(matrix)


@library_op("engram_sinkhorn_finalize_out", mutates_args=("out",))
def _finalize_out_op(matrix: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor, eps: float,
                     alpha: float, out: torch.Tensor) -> None:
    _finalize(matrix, row_scale, col_scale, eps, alpha, out)


@_finalize_out_op.register_fake
def _finalize_out_fake(matrix, row_scale, col_scale, eps, alpha, out):
    _check(matrix, row_scale, col_scale, eps, alpha, out, device=False)


def engram_sinkhorn_finalize(matrix, row_scale, col_scale, eps, alpha, out: Optional[torch.Tensor] = None):
    """Per row of ``matrix`` [R, D] fp32: ``x = row_scale * matrix * col_scale``, ``out = x * alpha / (norm(x) +
    eps)``; row_scale is not modified. Returns ``out`` (a new fp32 tensor, or the caller's [R, D] fp32 one). As
    tile_kernels 2.1 ``engram.engram_sinkhorn_finalize``."""
    if torch.compiler.is_compiling():
        if out is None:
            return _finalize_op(matrix, row_scale, col_scale, eps, alpha)
        _finalize_out_op(matrix, row_scale, col_scale, eps, alpha, out)
        return out
    return _finalize(matrix, row_scale, col_scale, eps, alpha, out)
