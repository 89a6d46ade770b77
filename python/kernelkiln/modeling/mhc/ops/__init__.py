"""tile_kernels 1.0.0's ``modeling.mhc.ops``: the mHC autograd Functions over KernelKiln's 2.1 mHC kernels
(kernelkiln.mhc), with 1.0.0's signatures, defaults and shapes (mixes ``[..., m, 1]``, comb ``[..., m, m]``), and
its plain forward helpers. The residual-gradient protocol of mhc_post / mhc_pre_apply_mix / mhc_pre_norm_fn is
described in ``kernelkiln.modeling.mhc.ops._common``. The Functions live in the submodules, as in 1.0.0
(``ops.post.MHCPost``, ...); under torch.compile every Function is a pair of registered torch.library ops
(``kernelkiln::mhc_layer_*``) and every gradient is returned explicitly."""
from kernelkiln.modeling.mhc.ops.expand import expand_to_mhc
from kernelkiln.modeling.mhc.ops.head_compute_mix import mhc_head_compute_mix
from kernelkiln.modeling.mhc.ops.multilayer_recompute import mhc_multilayer_recompute
from kernelkiln.modeling.mhc.ops.norm_fn import mhc_pre_norm_fn
from kernelkiln.modeling.mhc.ops.post import mhc_post, mhc_post_bwd, mhc_post_fwd
from kernelkiln.modeling.mhc.ops.pre_apply_mix import mhc_pre_apply_mix
from kernelkiln.modeling.mhc.ops.pre_big_fuse import mhc_pre_big_fuse
from kernelkiln.modeling.mhc.ops.pre_split_mixes import mhc_pre_split_mixes
from kernelkiln.modeling.mhc.ops.sinkhorn import sinkhorn_normalize

__all__ = ["expand_to_mhc", "mhc_head_compute_mix", "mhc_multilayer_recompute", "mhc_pre_norm_fn", "mhc_post",
           "mhc_post_bwd", "mhc_post_fwd", "mhc_pre_apply_mix", "mhc_pre_big_fuse", "mhc_pre_split_mixes",
           "sinkhorn_normalize"]
