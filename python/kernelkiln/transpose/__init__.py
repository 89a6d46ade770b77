"""Transposes (tile_kernels v1 ``transpose`` module): ``transpose`` and ``batched_transpose``."""
from kernelkiln.transpose._api import batched_transpose, transpose

__all__ = ["transpose", "batched_transpose"]
