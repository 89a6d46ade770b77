"""Pure-PyTorch references that define KernelKiln's numerics (oracles for the kernels).

Imports only torch, so it works on machines without tilelang or a GPU. Names load their module on first
access (PEP 562), so a kernel family that needs one helper does not import every reference.
"""
import importlib

# public name -> submodule that defines it
_WHERE = {
    'FMT_MAX': 'quant',
    'LosslessScaleError': 'quant_lossless',
    'aux_fi': 'moe_router',
    'batched_transpose_weight_sf': 'quant_lossless',
    'cast': 'quant',
    'cast_back': 'quant',
    'cast_back_from_e5m6': 'quant_extra',
    'cast_dtype': 'stochastic',
    'cast_to_e5m6': 'quant_extra',
    'default_clamp_min': 'quant',
    'expand_to_fused': 'fused',
    'expand_to_fused_with_sf': 'fused',
    'fma_f32': 'fused',
    'get_fused_mapping': 'fused',
    'get_mapping_from_psum': 'swiglu',
    'get_sf_shape': 'quant',
    'group_count': 'moe_router',
    'inplace_unique_group_indices': 'moe_router',
    'mask_indices_by_tp': 'moe_router',
    'moe_topk_gate_backward': 'moe_router',
    'moe_topk_gate_forward': 'moe_router',
    'norm_backward_ref': 'norm',
    'norm_forward_ref': 'norm',
    'mega_moe_sf_ref': 'norm',
    'mega_moe_sf_rows': 'norm',
    'pack_ue8m0': 'norm',
    'normalize_weight': 'moe',
    'pack_e2m1': 'quant',
    'per_block_cast_lossless_ref': 'quant_lossless',
    'per_block_cast_ref': 'quant_block',
    'per_token_cast_and_cast_back_ref': 'quant_block',
    'per_token_cast_back_ref': 'quant_block',
    'per_token_cast_ref': 'quant',
    'philox4x32_10': 'moe_router',
    'reduce_fused': 'fused',
    'stable_topk': 'moe',
    'stochastic_round': 'stochastic',
    'swiglu_backward': 'swiglu',
    'swiglu_forward': 'swiglu',
    'top2_sum_gate': 'moe',
    'topk_gate_ref': 'moe',
    'topk_sum_and_topk_group_idx': 'moe',
    'unpack_from_e2m1fn_x2': 'quant',
}
__all__ = sorted(_WHERE)


def __getattr__(name):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelkiln.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kernelkiln.torch.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
