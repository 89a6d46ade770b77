"""The quant family's public functions declared here and their torch.library ops (kernelkiln._ops.library).

The other public functions (and the per_block, cast_back and swiglu ops) live in their op modules; each op's work
lives in its own module. Under ``torch.compile`` the functions here call the registered op (fresh outputs), otherwise
the module's function.
"""
from typing import Optional

import torch

from kernelkiln._ops.library import library_op
from kernelkiln.quant import _cast, _e5m6, _norm, _per_channel, _per_channel_v1, _per_token


def per_token_cast(x, fmt, num_per_channels, x_block_size=None, use_tma_aligned_col_major_sf=False,
                   round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, stochastic_cast=False, out=None):
    """Row-wise block quantization to e4m3 / e2m1 with fp32, E4M3 or packed UE8M0 scales.

    Same signature, semantics and outputs as tile_kernels 2.1 ``quant.per_token_cast``.
    Under ``torch.compile`` the call goes through the registered op ``kernelkiln::per_token_cast``.
    """
    if fmt == "e5m6":  # v1's E5M6 path
        return _e5m6.per_token_cast_dispatch(x, num_per_channels, x_block_size, use_tma_aligned_col_major_sf,
                                             round_sf, use_packed_ue8m0, use_e4m3_sf, stochastic_cast, out)
    if torch.compiler.is_compiling() and out is None and not stochastic_cast:
        if x_block_size is None:
            return torch.ops.kernelkiln.per_token_cast(x, fmt, num_per_channels, use_tma_aligned_col_major_sf,
                                                     round_sf, use_packed_ue8m0, use_e4m3_sf)
        if isinstance(x, (tuple, list)) and len(x) == 2 and len(x_block_size) == 2:
            return torch.ops.kernelkiln.per_token_cast_requant(x[0], x[1], x_block_size[0], x_block_size[1], fmt,
                                                             num_per_channels, use_tma_aligned_col_major_sf,
                                                             round_sf, use_packed_ue8m0, use_e4m3_sf)
    return _per_token.per_token_cast(x, fmt, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                                     use_packed_ue8m0, use_e4m3_sf, stochastic_cast, out)


# ---- RMSNorm (kernels/quant/norm_forward.py, norm_backward.py) ----


def norm_forward(x, weight, eps, residual=None, out_scale=1.0, out=None, residual_out=None, with_rstd=False):
    """RMSNorm with optional fused residual add; returns ``(out, rstd or None, norm_input)``.

    Same signature and outputs as tile_kernels 2.1 ``quant.norm_forward``; numerics and the
    fixed summation order are documented in ``kernelkiln.torch.norm``. Under ``torch.compile``
    (fresh outputs) the call goes through the registered op ``kernelkiln::norm_forward``.
    """
    if torch.compiler.is_compiling() and out is None and residual_out is None:
        y, rstd, ro = torch.ops.kernelkiln.norm_forward(x, weight, eps, residual, out_scale)
        return y, (rstd if with_rstd else None), (ro if residual is not None else x)
    return _norm.norm_forward(x, weight, eps, residual, out_scale, out, residual_out, with_rstd)


# ---- cast and per_channel_cast (kernels/quant/cast.py, per_channel_cast.py) ----


def cast(x, dtype, stochastic_rounding=False):
    """Element-wise dtype conversion, optionally with deterministic stochastic rounding.

    Same signature and results as tile_kernels 2.1 ``quant.cast``: x is any contiguous
    tensor (flattened); pairs and numerics in ``kernelkiln.torch.stochastic.cast_dtype``.
    Under ``torch.compile`` the call goes through the registered op ``kernelkiln::cast``.
    """
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.cast(x, dtype, stochastic_rounding)
    return _cast.cast(x, dtype, stochastic_rounding)


def per_channel_cast(x, fmt, num_per_tokens, round_sf=False, num_per_channels=None, use_packed_ue8m0=False):
    """Per-channel FP8 quantization over ``num_per_tokens``-row blocks; returns (q [T, H], sf).

    Same signature, semantics and outputs as tile_kernels 2.1 ``quant.per_channel_cast``
    for bf16/fp32 input. Under ``torch.compile`` it goes through ``kernelkiln::per_channel_cast``.
    """
    if torch.compiler.is_compiling() and num_per_channels is None and isinstance(x, torch.Tensor):
        return torch.ops.kernelkiln.per_channel_cast(x, fmt, num_per_tokens, round_sf, use_packed_ue8m0)
    return _per_channel.per_channel_cast(x, fmt, num_per_tokens, round_sf, num_per_channels, use_packed_ue8m0)


# ---- v1 per-channel casts fused with a transpose (kernels/quant/per_channel_transpose.py) ----


def per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf=False):
    """v1: per-channel FP8 quantization of x [T, H] bf16 fused with a transpose.

    Returns ``(q [H, T] e4m3, sf [T/gm, H] fp32)`` like tile_kernels v1. Under ``torch.compile``
    the call goes through ``kernelkiln::per_channel_cast_and_transpose``.
    """
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf)
    return _per_channel_v1.per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf)


def swiglu_forward_and_per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf=False, without_transpose=False,
                                                      swiglu_clamp_value=None):
    """v1: SwiGLU of x [T, 2I] bf16 (optional clamp), per-channel FP8 quantization and a transpose.

    Returns ``(q [I, T] e4m3, or [T, I] with without_transpose, sf [T/gm, I] fp32)``. Under
    ``torch.compile`` the call goes through ``kernelkiln::swiglu_forward_and_per_channel_cast_and_transpose``.
    """
    if torch.compiler.is_compiling():
        clamp = None if swiglu_clamp_value is None else float(swiglu_clamp_value)
        return torch.ops.kernelkiln.swiglu_forward_and_per_channel_cast_and_transpose(
            x, fmt, num_per_tokens, round_sf, without_transpose, clamp)
    return _per_channel_v1.swiglu_forward_and_per_channel_cast_and_transpose(
        x, fmt, num_per_tokens, round_sf, without_transpose, swiglu_clamp_value)


# ---- the torch.library ops (registered on the first lookup of one in torch.ops.kernelkiln) ----

@library_op("per_token_cast", mutates_args=())
def _per_token_cast_op(x: torch.Tensor, fmt: str, num_per_channels: int, use_tma_aligned_col_major_sf: bool,
                       round_sf: bool, use_packed_ue8m0: bool, use_e4m3_sf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _per_token.per_token_cast(x, fmt, num_per_channels, None, use_tma_aligned_col_major_sf, round_sf,
                                     use_packed_ue8m0, use_e4m3_sf)


@_per_token_cast_op.register_fake
def _per_token_cast_op_fake(x, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, use_e4m3_sf):
    # The real allocators, run under fake mode, give the exact shapes and strides (col-major sf too).
    _per_token._check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf,
                              use_tma_aligned_col_major_sf)
    t, h = x.shape
    kind = _per_token._sf_kind(use_e4m3_sf, use_packed_ue8m0)
    q = _per_token._alloc_q(t, h, x.device, fmt)
    sf = _per_token._sf_storage(t, -(-h // num_per_channels), _per_token._SF_DTYPE[kind],
                                use_tma_aligned_col_major_sf, x.device, kind == "ue8m0")
    return q, sf


@library_op("per_token_cast_requant", mutates_args=())
def _per_token_cast_requant_op(data: torch.Tensor, x_sf: torch.Tensor, block_m: int, block_k: int, fmt: str,
                               num_per_channels: int, use_tma_aligned_col_major_sf: bool, round_sf: bool,
                               use_packed_ue8m0: bool, use_e4m3_sf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """per_token_cast of pre-quantized input x = (data, x_sf) with x_block_size = (block_m, block_k)."""
    return _per_token.per_token_cast((data, x_sf), fmt, num_per_channels, (block_m, block_k),
                                     use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, use_e4m3_sf)


@_per_token_cast_requant_op.register_fake
def _per_token_cast_requant_op_fake(data, x_sf, block_m, block_k, fmt, num_per_channels, use_tma_aligned_col_major_sf,
                                    round_sf, use_packed_ue8m0, use_e4m3_sf):
    _per_token._check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf,
                              use_tma_aligned_col_major_sf)
    t, h = data.shape[0], data.shape[1] * (2 if data.dtype == torch.int8 else 1)
    kind = _per_token._sf_kind(use_e4m3_sf, use_packed_ue8m0)
    q = _per_token._alloc_q(t, h, data.device, fmt)
    sf = _per_token._sf_storage(t, -(-h // num_per_channels), _per_token._SF_DTYPE[kind],
                                use_tma_aligned_col_major_sf, data.device, kind == "ue8m0")
    return q, sf

# RMSNorm


@library_op("norm_forward", mutates_args=())
def _norm_forward_op(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float, residual: Optional[torch.Tensor],
                     out_scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Outputs may not alias inputs: norm_input is substituted by the wrapper, and the
    # residual_out slot is an empty tensor when there is no residual.
    y, rstd, norm_input = _norm.norm_forward(x, weight, eps, residual, out_scale, with_rstd=True)
    return y, rstd, (norm_input if residual is not None else x.new_empty(0))


@_norm_forward_op.register_fake
def _norm_forward_op_fake(x, weight, eps, residual, out_scale):
    if x.dim() not in (2, 3) or x.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"x must be a 2-D or 3-D bf16/fp32 tensor, got {tuple(x.shape)} {x.dtype}")
    ro = torch.empty_like(x, memory_format=torch.contiguous_format) if residual is not None else x.new_empty(0)
    return (torch.empty(x.shape, dtype=x.dtype, device=x.device),
            torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device), ro)

# cast and per_channel_cast


@library_op("cast", mutates_args=())
def _cast_op(x: torch.Tensor, dtype: torch.dtype, stochastic_rounding: bool) -> torch.Tensor:
    return _cast.cast(x, dtype, stochastic_rounding)


@_cast_op.register_fake
def _cast_op_fake(x, dtype, stochastic_rounding):
    _cast.check_args(x, dtype, stochastic_rounding)
    return torch.empty(x.shape, dtype=dtype, device=x.device)


@library_op("per_channel_cast", mutates_args=())
def _per_channel_cast_op(x: torch.Tensor, fmt: str, num_per_tokens: int, round_sf: bool,
                         use_packed_ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _per_channel.per_channel_cast(x, fmt, num_per_tokens, round_sf, None, use_packed_ue8m0)


@_per_channel_cast_op.register_fake
def _per_channel_cast_op_fake(x, fmt, num_per_tokens, round_sf, use_packed_ue8m0):
    _per_channel.check_args(x, fmt, num_per_tokens, round_sf, None, use_packed_ue8m0)
    return _per_channel.alloc(x, num_per_tokens, use_packed_ue8m0)

# v1 per-channel casts fused with a transpose


@library_op("per_channel_cast_and_transpose", mutates_args=())
def _per_channel_cast_and_transpose_op(x: torch.Tensor, fmt: str, num_per_tokens: int,
                                       round_sf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _per_channel_v1.per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf)


@_per_channel_cast_and_transpose_op.register_fake
def _per_channel_cast_and_transpose_op_fake(x, fmt, num_per_tokens, round_sf):
    _per_channel_v1.check_cast_and_transpose(x, fmt, num_per_tokens, round_sf)
    return _per_channel_v1.alloc(x.shape[0], x.shape[1], num_per_tokens, True, x.device)


@library_op("swiglu_forward_and_per_channel_cast_and_transpose", mutates_args=())
def _swiglu_per_channel_op(x: torch.Tensor, fmt: str, num_per_tokens: int, round_sf: bool, without_transpose: bool,
                           swiglu_clamp_value: Optional[float]) -> tuple[torch.Tensor, torch.Tensor]:
    return _per_channel_v1.swiglu_forward_and_per_channel_cast_and_transpose(
        x, fmt, num_per_tokens, round_sf, without_transpose, swiglu_clamp_value)


@_swiglu_per_channel_op.register_fake
def _swiglu_per_channel_op_fake(x, fmt, num_per_tokens, round_sf, without_transpose, swiglu_clamp_value):
    _per_channel_v1.check_swiglu(x, fmt, num_per_tokens, round_sf, without_transpose, swiglu_clamp_value)
    return _per_channel_v1.alloc(x.shape[0], x.shape[1] // 2, num_per_tokens, not without_transpose, x.device)
