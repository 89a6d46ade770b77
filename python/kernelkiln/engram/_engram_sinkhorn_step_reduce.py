"""engram_sinkhorn_step_reduce (tile_kernels 2.1 ``engram.engram_sinkhorn_step_reduce``): the step's column partials
summed in a fixed order.

Spec: kernelkiln_contract.engram_sinkhorn.ENGRAM_SINKHORN_STEP_REDUCE (docs/spec/): strictly sequential over the
partial rows, so the result is bitwise ``kernelkiln.torch.engram_sinkhorn_step_reduce_ordered``.
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.engram_sinkhorn import ENGRAM_SINKHORN_STEP_REDUCE as CONTRACT
from kernelkiln_contract.engram_sinkhorn import SINKHORN_ROW

__all__ = ["engram_sinkhorn_step_reduce"]


def _check(col_sumsq_partial, col_sumsq, device=True):
    checks.tensor("col_sumsq_partial", col_sumsq_partial, (torch.float32,), ndim=2)
    checks.tensor("col_sumsq", col_sumsq, (torch.float32,), ndim=1)
    d = col_sumsq_partial.shape[1]
    if d % SINKHORN_ROW:
        raise ValueError(f"col_sumsq_partial.shape[1] (head_dim) must be a multiple of {SINKHORN_ROW}, got {d}")
    if col_sumsq.shape[0] != d:
        raise ValueError(f"col_sumsq must have shape [{d}] (col_sumsq_partial's head_dim), got "
                         f"{tuple(col_sumsq.shape)}")
    checks.contiguous("col_sumsq_partial", col_sumsq_partial)
    checks.contiguous("col_sumsq", col_sumsq)
    checks.same_device("col_sumsq", col_sumsq, "col_sumsq_partial", col_sumsq_partial)
    if device and d:
        checks.cuda("col_sumsq_partial", col_sumsq_partial)


def _reduce(col_sumsq_partial, col_sumsq):
    _check(col_sumsq_partial, col_sumsq)
    p, d = col_sumsq_partial.shape
    if d:  # P = 0 still launches: the sums are then +0
        launch(CONTRACT, CONTRACT.key(threads=256), col_sumsq.device, col_sumsq_partial=col_sumsq_partial.data_ptr(),
               col_sumsq=col_sumsq.data_ptr(), head_dim=d, num_partials=p)


@library_op("engram_sinkhorn_step_reduce", mutates_args=("col_sumsq",))
def _step_reduce_op(col_sumsq_partial: torch.Tensor, col_sumsq: torch.Tensor) -> None:
    _reduce(col_sumsq_partial, col_sumsq)


@_step_reduce_op.register_fake
def _step_reduce_fake(col_sumsq_partial, col_sumsq):
    _check(col_sumsq_partial, col_sumsq, device=False)


def engram_sinkhorn_step_reduce(col_sumsq_partial, col_sumsq):
    """``col_sumsq[d] = sum_p col_sumsq_partial[p, d]`` (fp32, strictly in p order from +0), written into the
    caller's ``col_sumsq`` [D]; returns None. As tile_kernels 2.1 ``engram.engram_sinkhorn_step_reduce``."""
    if torch.compiler.is_compiling():
        return _step_reduce_op(col_sumsq_partial, col_sumsq)
    return _reduce(col_sumsq_partial, col_sumsq)
