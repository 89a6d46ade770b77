"""The Engram gate as an autograd layer (tile_kernels 2.1 ``modeling.engram``): ``EngramGateFn``, ``engram_gate``."""
from kernelkiln.modeling.engram._gate import EngramGateFn, engram_gate

__all__ = ["EngramGateFn", "engram_gate"]
