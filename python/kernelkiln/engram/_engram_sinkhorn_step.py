"""engram_sinkhorn_step (tile_kernels 2.1 ``engram.engram_sinkhorn_step``): one row normalization of the Engram
Sinkhorn iteration, with deterministic per-CTA column partials.

Spec: kernelkiln_contract.engram_sinkhorn.ENGRAM_SINKHORN_STEP (docs/spec/). The partial count is
3 * ``config.get_num_sms()``, read at run time as the peer does. Reference of the kernel's bits:
``kernelkiln.torch.engram_sinkhorn_step_ordered``.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.engram_sinkhorn import ENGRAM_SINKHORN_STEP as CONTRACT
from kernelkiln_contract.engram_sinkhorn import SINKHORN_PARTIALS_PER_SM, SINKHORN_ROW, sinkhorn_threads

__all__ = ["engram_sinkhorn_step"]


def check_sinkhorn_matrix(matrix, row_scale, col_scale, eps, device=True):
    """(rows, head_dim) of the step's and finalize's common arguments; raises naming the argument."""
    checks.tensor("matrix", matrix, (torch.float32,), ndim=2)
    checks.tensor("row_scale", row_scale, (torch.float32,), ndim=1)
    checks.tensor("col_scale", col_scale, (torch.float32,), ndim=1)
    checks.float_arg("eps", eps)
    rows, d = matrix.shape
    if d <= 0 or d % SINKHORN_ROW:
        raise ValueError(f"matrix.shape[1] (head_dim) must be a positive multiple of {SINKHORN_ROW}, got {d}")
    if row_scale.shape[0] != rows:
        raise ValueError(f"row_scale must have shape [{rows}] (matrix's rows), got {tuple(row_scale.shape)}")
    if col_scale.shape[0] != d:
        raise ValueError(f"col_scale must have shape [{d}] (matrix's head_dim), got {tuple(col_scale.shape)}")
    for name, t in (("matrix", matrix), ("row_scale", row_scale), ("col_scale", col_scale)):
        checks.contiguous(name, t)
    checks.same_device("row_scale", row_scale, "matrix", matrix)
    checks.same_device("col_scale", col_scale, "matrix", matrix)
    if device:
        checks.cuda("matrix", matrix)
        checks.aligned("matrix", matrix, 16)
        checks.aligned("col_scale", col_scale, 16)
    return rows, d


def num_partials():
    """The step's partial rows (its CTAs): 3 per SM of the current device, as the peer."""
    return SINKHORN_PARTIALS_PER_SM * config.get_num_sms()


def _step(matrix, row_scale, col_scale, eps):
    rows, d = check_sinkhorn_matrix(matrix, row_scale, col_scale, eps)
    p = num_partials()
    row_norm = torch.empty_like(row_scale)
    partial = matrix.new_empty((p, d))
    # launched for R = 0 too: every CTA then writes its zero partial row, as in the peer
    launch(CONTRACT, CONTRACT.key(threads=sinkhorn_threads(d)), matrix.device, matrix=matrix.data_ptr(),
           row_scale=row_scale.data_ptr(), col_scale=col_scale.data_ptr(), row_norm=row_norm.data_ptr(),
           col_sumsq_partial=partial.data_ptr(), num_rows=rows, head_dim=d, num_ctas=p, eps=float(eps))
    return row_norm, partial


@library_op("engram_sinkhorn_step", mutates_args=("row_scale",))
def _step_op(matrix: torch.Tensor, row_scale: torch.Tensor, col_scale: torch.Tensor,
             eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _step(matrix, row_scale, col_scale, eps)


@_step_op.register_fake
def _step_fake(matrix, row_scale, col_scale, eps):
    _, d = check_sinkhorn_matrix(matrix, row_scale, col_scale, eps, device=False)
    return torch.empty_like(row_scale), matrix.new_empty((num_partials(), d))


def engram_sinkhorn_step(matrix, row_scale, col_scale, eps):
    """One Sinkhorn row step on ``matrix`` [R, D] fp32 (D a multiple of 256): per row the norm of
    ``x = row_scale * matrix * col_scale``, ``row_scale *= 1 / (norm + eps)`` in place, and per CTA the column sums
    of ``(x / (norm + eps))**2``. Returns ``(row_norm [R], col_sumsq_partial [3 * SMs, D])``, fp32. As tile_kernels
    2.1 ``engram.engram_sinkhorn_step``; reduce the partials with ``engram_sinkhorn_step_reduce``."""
    if torch.compiler.is_compiling():
        return _step_op(matrix, row_scale, col_scale, eps)
    return _step(matrix, row_scale, col_scale, eps)
