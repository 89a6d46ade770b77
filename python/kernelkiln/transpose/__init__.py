"""Transposes (tile_kernels v1 ``transpose`` module): ``transpose`` and ``batched_transpose``."""
import torch

from kernelkiln.transpose import _transpose

__all__ = ["transpose", "batched_transpose"]


def _register_ops():
    """Define the family's torch.library ops (schemas and fake implementations) that torch.compile traces.

    kernelkiln._ops.torch_ops.register runs this once, on the first lookup of one of the family's ops in
    torch.ops.kernelkiln, not at import: eager calls never go through the ops, and registering them made the
    import that every process's first eager call pays 5 ms instead of 0.4 ms (CPU build machine).
    """
    @torch.library.custom_op("kernelkiln::batched_transpose", mutates_args=())
    def _batched_transpose_op(x: torch.Tensor) -> torch.Tensor:
        return _transpose.batched_transpose(x)

    @_batched_transpose_op.register_fake
    def _(x):
        _transpose._check("x", x, 3)
        b, m, n = x.shape
        return x.new_empty((b, n, m))

    @torch.library.custom_op("kernelkiln::transpose", mutates_args=())
    def _transpose_op(x: torch.Tensor) -> torch.Tensor:
        return _transpose.transpose(x)

    @_transpose_op.register_fake
    def _(x):
        _transpose._check("x", x, 2)
        m, n = x.shape
        return x.new_empty((n, m))


def transpose(x):
    """[M, N] (M, N % 64 == 0, inner stride 1, row stride % 4 == 0; e4m3, bf16 or fp32) -> contiguous [N, M]."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.transpose(x)
    return _transpose.transpose(x)


def batched_transpose(x):
    """[B, M, N] (same constraints per batch; batch stride % 4 == 0) -> contiguous [B, N, M]."""
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.batched_transpose(x)
    return _transpose.batched_transpose(x)
