"""Manifold-constrained hyper-connections (tile_kernels 2.1 ``mhc``): expanding the residual into m streams, the
pre/post/head mixes and their Sinkhorn normalization, applying the mixes, the fused pre-block and the multi-layer
recompute, each with its backward. One module per op; each lists its public names in ``__all__`` and declares its
torch.library op beside its public function."""
from kernelkiln._ops.family import export_ops

__all__ = export_ops(__name__, globals())
del export_ops
