"""Transforms (tile_kernels 2.1 ``transform``): ``apply_rotary``, rotary position embedding in place."""
from kernelkiln.transform._api import apply_rotary

__all__ = ["apply_rotary"]
