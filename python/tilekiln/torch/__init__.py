"""Pure-PyTorch references that define TileKiln's numerics (oracles for the kernels).

Imports only torch, so it works on machines without tilelang or a GPU.
"""

from .moe import normalize_weight, stable_topk, topk_gate_ref
from .moe import top2_sum_gate, topk_sum_and_topk_group_idx
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
