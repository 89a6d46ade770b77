"""tile_kernels 1.0.0's mHC autograd layer (``modeling.mhc``): ``expand_from_embedding``, ``mhc_pre``, ``mhc_head``
(module ``functional``) and the Functions and plain helpers of ``ops``, over KernelKiln's 2.1 mHC kernels.

Eager training follows 1.0.0's residual-gradient protocol (``ops._common``): mhc_post's backward leaves its residual
gradient on the residual's storage for mhc_pre_apply_mix and mhc_pre_norm_fn to add into. Under
``torch.compile(fullgraph=True)`` each Function is a pair of registered ops (``kernelkiln::mhc_layer_*``: the
forward and its derivative, with fake implementations) and every gradient is returned explicitly, so the
protocol's attribute and ``main_grad`` are not used there; run a block's mhc_pre and mhc_post either both eager or
both compiled.
"""
from kernelkiln.modeling.mhc import ops  # noqa: F401
from kernelkiln.modeling.mhc.functional import expand_from_embedding, mhc_head, mhc_pre

__all__ = ["expand_from_embedding", "mhc_pre", "mhc_head", "ops"]
