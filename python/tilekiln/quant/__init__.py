"""Quantization operators (tile_kernels.quant compatible)."""
import torch

from tilekiln.quant import _per_token
from tilekiln.quant._per_token import (  # noqa: F401
    per_token_cast_with_precomputed_sf,
    per_token_cast_with_sf_only,
)
from tilekiln.torch.quant import unpack_from_e2m1fn_x2  # noqa: F401  (host helper, no kernel)

__all__ = ["per_token_cast", "per_token_cast_with_sf_only", "per_token_cast_with_precomputed_sf",
           "unpack_from_e2m1fn_x2"]


@torch.library.custom_op("tilekiln::per_token_cast", mutates_args=(), device_types="cuda")
def _per_token_cast_op(x: torch.Tensor, fmt: str, num_per_channels: int, use_tma_aligned_col_major_sf: bool,
                       round_sf: bool, use_packed_ue8m0: bool, use_e4m3_sf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _per_token.per_token_cast(x, fmt, num_per_channels, None, use_tma_aligned_col_major_sf, round_sf,
                                     use_packed_ue8m0, use_e4m3_sf)


@_per_token_cast_op.register_fake
def _(x, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, use_e4m3_sf):
    # The real allocators, run under fake mode, give the exact shapes and strides (col-major sf too).
    _per_token._check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf,
                              use_tma_aligned_col_major_sf)
    t, h = x.shape
    kind = _per_token._sf_kind(use_e4m3_sf, use_packed_ue8m0)
    q = _per_token._alloc_q(t, h, x.device, fmt)
    sf = _per_token._sf_storage(t, -(-h // num_per_channels), _per_token._SF_DTYPE[kind],
                                use_tma_aligned_col_major_sf, x.device, kind == "ue8m0")
    return q, sf


@torch.library.custom_op("tilekiln::per_token_cast_requant", mutates_args=(), device_types="cuda")
def _per_token_cast_requant_op(data: torch.Tensor, x_sf: torch.Tensor, block_m: int, block_k: int, fmt: str,
                               num_per_channels: int, use_tma_aligned_col_major_sf: bool, round_sf: bool,
                               use_packed_ue8m0: bool, use_e4m3_sf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """per_token_cast of pre-quantized input x = (data, x_sf) with x_block_size = (block_m, block_k)."""
    return _per_token.per_token_cast((data, x_sf), fmt, num_per_channels, (block_m, block_k),
                                     use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, use_e4m3_sf)


@_per_token_cast_requant_op.register_fake
def _(data, x_sf, block_m, block_k, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
      use_e4m3_sf):
    _per_token._check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf,
                              use_tma_aligned_col_major_sf)
    t, h = data.shape[0], data.shape[1] * (2 if data.dtype == torch.int8 else 1)
    kind = _per_token._sf_kind(use_e4m3_sf, use_packed_ue8m0)
    q = _per_token._alloc_q(t, h, data.device, fmt)
    sf = _per_token._sf_storage(t, -(-h // num_per_channels), _per_token._SF_DTYPE[kind],
                                use_tma_aligned_col_major_sf, data.device, kind == "ue8m0")
    return q, sf


def per_token_cast(x, fmt, num_per_channels, x_block_size=None, use_tma_aligned_col_major_sf=False,
                   round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, stochastic_cast=False, out=None):
    """Row-wise block quantization to e4m3 / e2m1 with fp32, E4M3 or packed UE8M0 scales.

    Same signature, semantics and outputs as tile_kernels 2.1 ``quant.per_token_cast``.
    Under ``torch.compile`` the call goes through the registered op ``tilekiln::per_token_cast``.
    """
    if torch.compiler.is_compiling() and out is None and not stochastic_cast:
        if x_block_size is None:
            return torch.ops.tilekiln.per_token_cast(x, fmt, num_per_channels, use_tma_aligned_col_major_sf,
                                                     round_sf, use_packed_ue8m0, use_e4m3_sf)
        if isinstance(x, (tuple, list)) and len(x) == 2 and len(x_block_size) == 2:
            return torch.ops.tilekiln.per_token_cast_requant(x[0], x[1], x_block_size[0], x_block_size[1], fmt,
                                                             num_per_channels, use_tma_aligned_col_major_sf,
                                                             round_sf, use_packed_ue8m0, use_e4m3_sf)
    return _per_token.per_token_cast(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                                     use_packed_ue8m0, use_e4m3_sf, stochastic_cast, out)
