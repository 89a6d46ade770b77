"""Pure-PyTorch references that define TileKiln's numerics (oracles for the kernels).

Imports only torch, so it works on machines without tilelang or a GPU.
"""

from .moe import normalize_weight, stable_topk, topk_gate_ref
from .moe import top2_sum_gate, topk_sum_and_topk_group_idx
from .norm import norm_backward_ref, norm_forward_ref
from .stochastic import cast_dtype, stochastic_round
from .swiglu import get_mapping_from_psum, swiglu_backward, swiglu_forward
from .quant import (
    FMT_MAX,
    cast,
    cast_back,
    default_clamp_min,
    get_sf_shape,
    pack_e2m1,
    per_token_cast_ref,
    unpack_from_e2m1fn_x2,
)

__all__ = [
    'get_mapping_from_psum',
    'swiglu_backward',
    'swiglu_forward',
    'cast_dtype',
    'stochastic_round',
    'norm_backward_ref',
    'norm_forward_ref',
    'FMT_MAX',
    'cast',
    'cast_back',
    'default_clamp_min',
    'get_sf_shape',
    'normalize_weight',
    'pack_e2m1',
    'per_token_cast_ref',
    'stable_topk',
    'topk_gate_ref',
    'top2_sum_gate',
    'topk_sum_and_topk_group_idx',
    'unpack_from_e2m1fn_x2',
]

from .quant_block import (  # noqa: E402
    per_block_cast_ref,
    per_token_cast_and_cast_back_ref,
    per_token_cast_back_ref,
)

__all__ += ['per_block_cast_ref', 'per_token_cast_and_cast_back_ref', 'per_token_cast_back_ref']

from .fused import expand_to_fused, expand_to_fused_with_sf, fma_f32, get_fused_mapping, reduce_fused  # noqa: E402

__all__ += ['expand_to_fused', 'expand_to_fused_with_sf', 'fma_f32', 'get_fused_mapping', 'reduce_fused']

from .quant_extra import cast_back_from_e5m6, cast_to_e5m6  # noqa: E402

__all__ += ['cast_back_from_e5m6', 'cast_to_e5m6']

from .moe_router import (  # noqa: E402
    aux_fi,
    group_count,
    inplace_unique_group_indices,
    mask_indices_by_tp,
    moe_topk_gate_backward,
    moe_topk_gate_forward,
    philox4x32_10,
)

__all__ += ['aux_fi', 'group_count', 'inplace_unique_group_indices', 'mask_indices_by_tp',
            'moe_topk_gate_backward', 'moe_topk_gate_forward', 'philox4x32_10']

from .quant_lossless import LosslessScaleError, batched_transpose_weight_sf, per_block_cast_lossless_ref  # noqa: E402

__all__ += ['LosslessScaleError', 'batched_transpose_weight_sf', 'per_block_cast_lossless_ref']
