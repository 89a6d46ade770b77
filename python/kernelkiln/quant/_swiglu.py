"""swiglu_forward_and_per_token_cast and swiglu_forward (tile_kernels 2.1 signatures).

x [N, 2I] bf16/fp32 (gate = left half, up = right half) over the expert-major
layout: expert e owns rows [align(psum[e-1], A), psum[e]) with A =
config.get_token_alignment(); the other rows are padding and are left
unwritten (data and scales), as in the peer. Numerics: kernels/quant/swiglu_forward.py
and kernelkiln.torch.swiglu.
"""
import math

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.quant import _per_token
from kernelkiln_contract.quant_fused import SWIGLU_FORWARD as CONTRACT
from kernelkiln_contract.quant_fused import swiglu_forward_rows

OP = CONTRACT.op
_IN_DTYPES = (torch.bfloat16, torch.float32)
_IN_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
QUANT_FORMATS = ("e4m3",)
CHANNEL_BLOCKS = (32, 128)
FLOAT_FORMATS = {"bf16": (torch.bfloat16, "bfloat16"), "fp32": (torch.float32, "float32")}


def _check_x(x):
    checks.tensor("x", x, _IN_DTYPES, ndim=2)
    n, two_i = x.shape
    if two_i % 128 or two_i == 0:
        raise ValueError(f"x.shape[1] must be 2*I with I a positive multiple of 64, got {two_i}")
    vec = 8 if x.dtype == torch.bfloat16 else 4
    if x.stride(1) != 1 or (n > 1 and x.stride(0) % vec):
        raise ValueError(f"x must have inner stride 1 and a row stride that is a multiple of {vec} elements "
                         f"(16 bytes); got strides {tuple(x.stride())}")
    checks.aligned("x", x, 16)
    return n, two_i // 2, vec


def _check_routing(x, n, psum, topk_weights, routed_scaling_factor):
    if psum is not None:
        checks.tensor("psum_num_tokens_per_expert", psum, (torch.int32,), ndim=1)
        if psum.shape[0] == 0 or psum.stride(0) != 1:
            raise ValueError(f"psum_num_tokens_per_expert must be a non-empty contiguous int32 [E] tensor, got "
                             f"shape {tuple(psum.shape)}, strides {tuple(psum.stride())}")
        checks.same_device("psum_num_tokens_per_expert", psum, "x", x)
    if topk_weights is not None:
        checks.tensor("topk_weights", topk_weights, (torch.float32,), ndim=1)
        if topk_weights.shape[0] != n or topk_weights.stride(0) != 1:
            raise ValueError(f"topk_weights must be a contiguous float32 [N] = [{n}] tensor (one weight per "
                             f"expanded row), got shape {tuple(topk_weights.shape)}")
        checks.same_device("topk_weights", topk_weights, "x", x)
    if routed_scaling_factor is not None:
        if topk_weights is None:
            raise ValueError("routed_scaling_factor requires topk_weights (it scales the routing weights)")
        if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
            raise TypeError(f"routed_scaling_factor must be a float or None, got "
                            f"{type(routed_scaling_factor).__name__}")


def _check_clamp(x, clamp_value, clamped_count):
    if clamp_value is not None:
        if isinstance(clamp_value, bool) or not isinstance(clamp_value, (int, float)):
            raise TypeError(f"clamp_value must be a float or None, got {type(clamp_value).__name__}")
        if not (math.isfinite(clamp_value) and clamp_value >= 0):
            raise ValueError(f"clamp_value must be a finite float >= 0, got {clamp_value!r}")
    if clamped_count is not None:
        if clamp_value is None:
            raise ValueError("clamped_count requires clamp_value (nothing is clamped without it)")
        checks.tensor("clamped_count", clamped_count, (torch.int64,), ndim=1)
        if clamped_count.shape[0] != 4 or clamped_count.stride(0) != 1:
            raise ValueError(f"clamped_count must be a contiguous int64 tensor of shape (4,), got shape "
                             f"{tuple(clamped_count.shape)}")
        checks.same_device("clamped_count", clamped_count, "x", x)


def _run(x, n, hidden, vec, out, sf, fmt_name, g, sf_kind, psum, topk_weights, routed_scaling_factor,
         clamp_value, clamped_count, round_sf):
    checks.cuda("x", x)
    if n == 0:
        return
    sf_t, sf_k = _per_token._sf_strides(sf, sf_kind == "ue8m0") if sf is not None else (0, 0)
    values = CONTRACT.key(in_dtype=_IN_NAMES[x.dtype], fmt=fmt_name, num_per_channels=g, sf_kind=sf_kind,
                          rows=swiglu_forward_rows())
    rsf = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    clamp_min = config.get_amax_clamp_for_quant("e4m3", False) if sf is not None else 0.0
    launch(CONTRACT, values, x.device,
           x=x.data_ptr(), out=out.data_ptr(), sf=sf.data_ptr() if sf is not None else 0,
           psum=psum.data_ptr() if psum is not None else 0,
           weights=topk_weights.data_ptr() if topk_weights is not None else 0,
           counts=clamped_count.data_ptr() if clamped_count is not None else 0,
           num_rows=n, hidden_div64=hidden // 64, x_stride_vec=x.stride(0) // vec,
           num_experts=psum.shape[0] if psum is not None else 0, alignment=config.get_token_alignment(),
           with_weight=int(topk_weights is not None), rsf=rsf, use_clamp=int(clamp_value is not None),
           clamp_value=float(clamp_value) if clamp_value is not None else 0.0,
           count_clamp=int(clamped_count is not None), sf_stride_t=sf_t, sf_stride_k=sf_k, round_sf=int(round_sf),
           clamp_min=clamp_min)


def swiglu_forward_and_per_token_cast(x, fmt, num_per_channels, psum_num_tokens_per_expert=None, topk_weights=None,
                                      routed_scaling_factor=None, use_tma_aligned_col_major_sf=False,
                                      round_sf=False, use_packed_ue8m0=False, clamp_value=None, clamped_count=None):
    """SwiGLU then per-token e4m3 quantization (1 x num_per_channels blocks); returns (data, sf)."""
    n, hidden, vec = _check_x(x)
    checks.choice("fmt", fmt, QUANT_FORMATS)
    checks.choice("num_per_channels", num_per_channels, CHANNEL_BLOCKS)
    checks.scale_flags(round_sf, use_packed_ue8m0, use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf)
    _check_routing(x, n, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor)
    _check_clamp(x, clamp_value, clamped_count)
    sf_kind = "ue8m0" if use_packed_ue8m0 else "fp32"
    q = torch.empty((n, hidden), dtype=torch.float8_e4m3fn, device=x.device)
    sf = _per_token._sf_storage(n, -(-hidden // num_per_channels), _per_token._SF_DTYPE[sf_kind],
                                use_tma_aligned_col_major_sf, x.device, sf_kind == "ue8m0")
    _run(x, n, hidden, vec, q, sf, "e4m3", num_per_channels, sf_kind, psum_num_tokens_per_expert, topk_weights,
         routed_scaling_factor, clamp_value, clamped_count, round_sf)
    return q, sf


def swiglu_forward(x, fmt, psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                   clamp_value=None, clamped_count=None):
    """SwiGLU without quantization: fmt 'bf16' or 'fp32' output [N, I]."""
    n, hidden, vec = _check_x(x)
    checks.choice("fmt", fmt, tuple(FLOAT_FORMATS))
    _check_routing(x, n, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor)
    _check_clamp(x, clamp_value, clamped_count)
    dtype, name = FLOAT_FORMATS[fmt]
    out = torch.empty((n, hidden), dtype=dtype, device=x.device)
    _run(x, n, hidden, vec, out, None, name, 0, "none", psum_num_tokens_per_expert, topk_weights,
         routed_scaling_factor, clamp_value, clamped_count, False)
    return out
