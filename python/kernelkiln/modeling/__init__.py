"""Autograd layers over the kernels (tile_kernels 2.1 ``modeling``): ``modeling.engram``."""
from kernelkiln.modeling import engram  # noqa: F401

__all__ = ["engram"]
