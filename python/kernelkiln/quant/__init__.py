"""Quantization operators (tile_kernels.quant compatible).

Each op lives in its own module (``_per_token``, ``_per_block``, ``_cast_back``, ``_cast``, ``_per_channel``,
``_per_channel_v1``, ``_swiglu`` / ``_swiglu_bwd``, ``_norm``, ``_e5m6``, ``_lossless``, ``_weight_sf``); ``_api``
holds the public functions of the rest. Each torch.library op is declared once beside its public function and
registered on the first lookup of one of them in ``torch.ops.kernelkiln``, not at import.
"""
from kernelkiln._formats import LosslessScaleError, unpack_from_e2m1fn_x2  # noqa: F401  (host helper, no kernel)
from kernelkiln.quant._api import (  # noqa: F401
    cast,
    norm_forward,
    per_channel_cast,
    per_channel_cast_and_transpose,
    per_token_cast,
    swiglu_forward_and_per_channel_cast_and_transpose,
)
from kernelkiln.quant._cast_back import cast_back, per_token_cast_and_cast_back, per_token_cast_back  # noqa: F401
from kernelkiln.quant._e5m6 import cast_back_e5m6, per_token_cast_to_e5m6  # noqa: F401  (v1 E5M6)
from kernelkiln.quant._lossless import check_errors, per_block_cast_lossless  # noqa: F401
from kernelkiln.quant._norm import norm_backward, norm_backward_num_partials, norm_forward_and_per_token_cast  # noqa: F401
from kernelkiln.quant._per_block import (  # noqa: F401
    per_block_cast,
    per_block_cast_with_precomputed_sf,
    per_block_cast_with_sf_only,
)
from kernelkiln.quant._per_channel import per_channel_cast_fused  # noqa: F401  (v1)
from kernelkiln.quant._per_token import per_token_cast_with_precomputed_sf, per_token_cast_with_sf_only  # noqa: F401
# compile-aware wrappers of the swiglu forward pair and the backward pair (their torch.library ops)
from kernelkiln.quant._swiglu_bwd import (  # noqa: F401
    swiglu_backward,
    swiglu_backward_and_per_token_cast,
    swiglu_forward,
    swiglu_forward_and_per_token_cast,
)
from kernelkiln.quant._weight_sf import batched_transpose_weight_sf  # noqa: F401

__all__ = [
    # per-token, per-block, per-channel casts and their inverses (2.1)
    "per_token_cast", "per_token_cast_with_sf_only", "per_token_cast_with_precomputed_sf",
    "per_block_cast", "per_block_cast_with_sf_only", "per_block_cast_with_precomputed_sf", "per_block_cast_lossless",
    "per_channel_cast", "cast_back", "per_token_cast_back", "per_token_cast_and_cast_back", "cast",
    "batched_transpose_weight_sf", "unpack_from_e2m1fn_x2",
    # fused SwiGLU and RMSNorm (2.1)
    "swiglu_forward_and_per_token_cast", "swiglu_forward", "swiglu_backward_and_per_token_cast", "swiglu_backward",
    "norm_forward", "norm_forward_and_per_token_cast", "norm_backward", "norm_backward_num_partials",
    # v1-only
    "per_token_cast_to_e5m6", "cast_back_e5m6", "per_channel_cast_and_transpose",
    "swiglu_forward_and_per_channel_cast_and_transpose", "per_channel_cast_fused",
    # errors
    "LosslessScaleError", "check_errors",
]
