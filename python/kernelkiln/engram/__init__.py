"""Engram gating (tile_kernels 2.1 ``engram``): n-gram hashing, the fused gate weight, the gate forward and backward,
the weight-gradient reduction and the Sinkhorn optimizer steps of the Engram tables. One module per op; each lists
its public names in ``__all__`` and declares its torch.library op beside its public function."""
from kernelkiln._ops.family import export_ops

__all__ = export_ops(__name__, globals())
del export_ops
