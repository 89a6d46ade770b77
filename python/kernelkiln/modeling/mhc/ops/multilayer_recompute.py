"""``mhc_multilayer_recompute``: tile_kernels 1.0.0 re-exports its kernel's dispatcher here; its signature is 2.1's,
so this is kernelkiln.mhc.mhc_multilayer_recompute itself."""
from kernelkiln.mhc import mhc_multilayer_recompute

__all__ = ["mhc_multilayer_recompute"]
