"""The mHC references under tile_kernels 2.1's module path ``tile_kernels.torch.mhc``: every peer reference (stream
ops, mixes, Sinkhorn), gathered from the modules that define them, so tests that import that path find them here."""
from kernelkiln.torch.mhc_mixes import (
    mhc_head_compute_mix_ref,
    mhc_pre_norm_fn_partials_ref,
    mhc_pre_norm_fn_ref,
    mhc_pre_split_mixes_ref,
)
from kernelkiln.torch.mhc_sinkhorn import sinkhorn_normalize_ref
from kernelkiln.torch.mhc_streams import expand_to_mhc_ref, mhc_post_ref, mhc_pre_apply_mix_ref

__all__ = ["expand_to_mhc_ref", "sinkhorn_normalize_ref", "mhc_head_compute_mix_ref", "mhc_pre_split_mixes_ref",
           "mhc_pre_apply_mix_ref", "mhc_post_ref", "mhc_pre_norm_fn_ref", "mhc_pre_norm_fn_partials_ref"]
