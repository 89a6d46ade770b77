"""Autograd layers over the kernels: ``modeling.engram`` (tile_kernels 2.1's) and ``modeling.mhc`` (tile_kernels
1.0.0's mHC layer, which 2.1 dropped, over the 2.1 mHC kernels)."""
from kernelkiln.modeling import engram  # noqa: F401
from kernelkiln.modeling import mhc  # noqa: F401

__all__ = ["engram", "mhc"]
