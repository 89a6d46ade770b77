"""The transpose family's public functions and their torch.library ops (one declaration each)."""
import torch

from kernelkiln._ops.library import library_op
from kernelkiln.transpose import _transpose


def _transpose_fake(x):
    _transpose._check("x", x, 2)
    m, n = x.shape
    return x.new_empty((n, m))


@library_op("transpose", fake=_transpose_fake)
def _transpose_op(x: torch.Tensor) -> torch.Tensor:
    return _transpose.transpose(x)


def transpose(x):
    """[M, N] (M, N % 64 == 0, inner stride 1, row stride % 4 == 0; e4m3, bf16 or fp32) -> contiguous [N, M]."""
    if torch.compiler.is_compiling():
        return _transpose_op(x)
    return _transpose.transpose(x)


def _batched_transpose_fake(x):
    _transpose._check("x", x, 3)
    b, m, n = x.shape
    return x.new_empty((b, n, m))


@library_op("batched_transpose", fake=_batched_transpose_fake)
def _batched_transpose_op(x: torch.Tensor) -> torch.Tensor:
    return _transpose.batched_transpose(x)


def batched_transpose(x):
    """[B, M, N] (same constraints per batch; batch stride % 4 == 0) -> contiguous [B, N, M]."""
    if torch.compiler.is_compiling():
        return _batched_transpose_op(x)
    return _transpose.batched_transpose(x)
