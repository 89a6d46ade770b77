"""tile_kernels v1 per-channel ops with a transpose (docs/SPEC.md §3.2, v1-only rows).

per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf=False)
    x [T, H] bf16, T % 128 == 0, H % 64 == 0, gm in {32, 128}
    -> (q [H, T] e4m3 = transpose of the per-channel quantized x, sf [T/gm, H] fp32)
swiglu_forward_and_per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf=False,
                                                  without_transpose=False, swiglu_clamp_value=None)
    x [T, 2I] bf16, T % 128 == 0, 2I % 128 == 0 -> (q [I, T] or [T, I] e4m3, sf [T/gm, I] fp32)
Kernel: kernels/quant/per_channel_transpose.py. References: kernelkiln.torch.quant_v1.
"""
import math

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.quant_fused import PER_CHANNEL_TRANSPOSE as CONTRACT

OP = CONTRACT.op
FORMATS = ("e4m3",)
TOKEN_BLOCKS = (32, 128)


def _check_common(x, fmt, num_per_tokens, round_sf):
    checks.tensor("x", x, (torch.bfloat16,), ndim=2)
    checks.choice("fmt", fmt, FORMATS)
    if isinstance(num_per_tokens, bool) or not isinstance(num_per_tokens, int):
        raise TypeError(f"num_per_tokens must be an int, got {type(num_per_tokens).__name__}")
    checks.choice("num_per_tokens", num_per_tokens, TOKEN_BLOCKS)
    checks.flag("round_sf", round_sf)
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous (row-major), got strides {tuple(x.stride())}")


def check_cast_and_transpose(x, fmt, num_per_tokens, round_sf):
    """Every check that needs no GPU (shared by the op and its fake)."""
    _check_common(x, fmt, num_per_tokens, round_sf)
    t, h = x.shape
    if t % 128 or h % 64:
        raise ValueError(f"x must have T % 128 == 0 and H % 64 == 0, got shape {tuple(x.shape)}")


def check_swiglu(x, fmt, num_per_tokens, round_sf, without_transpose, swiglu_clamp_value):
    _check_common(x, fmt, num_per_tokens, round_sf)
    checks.flag("without_transpose", without_transpose)
    if swiglu_clamp_value is not None:
        if isinstance(swiglu_clamp_value, bool) or not isinstance(swiglu_clamp_value, (int, float)):
            raise TypeError(f"swiglu_clamp_value must be None or a float, got {type(swiglu_clamp_value).__name__}")
        if not (math.isfinite(swiglu_clamp_value) and swiglu_clamp_value >= 0):
            raise ValueError(f"swiglu_clamp_value must be a finite float >= 0, got {swiglu_clamp_value!r}")
    t, h2 = x.shape
    if t % 128 or h2 % 128:
        raise ValueError(f"x must be [T, 2I] with T % 128 == 0 and 2I % 128 == 0, got shape {tuple(x.shape)}")


def alloc(t, cols, num_per_tokens, transpose, device):
    q = torch.empty((cols, t) if transpose else (t, cols), dtype=torch.float8_e4m3fn, device=device)
    sf = torch.empty((t // num_per_tokens, cols), dtype=torch.float32, device=device)
    return q, sf


def _run(x, prologue, cols, num_per_tokens, transpose, round_sf, clamp_value):
    checks.cuda("x", x)
    checks.aligned("x", x, 16)
    t = x.shape[0]
    q, sf = alloc(t, cols, num_per_tokens, transpose, x.device)
    if t == 0 or cols == 0:
        return q, sf
    clamp_min = config.get_amax_clamp_for_quant("e4m3", False)
    use_clamp = clamp_value is not None
    launch(CONTRACT, CONTRACT.key(prologue=prologue, num_per_tokens=num_per_tokens, transpose=transpose), x.device,
           x=x.data_ptr(), out=q.data_ptr(), sf=sf.data_ptr(), cols_div64=cols // 64, tokens_div128=t // 128,
           round_sf=int(round_sf), use_clamp=int(use_clamp), clamp_value=float(clamp_value) if use_clamp else 0.0,
           clamp_min=clamp_min)
    return q, sf


def per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf=False):
    """Per-channel FP8 quantization of x [T, H] fused with a transpose; returns (q [H, T], sf [T/gm, H])."""
    check_cast_and_transpose(x, fmt, num_per_tokens, round_sf)
    return _run(x, "plain", x.shape[1], num_per_tokens, True, round_sf, None)


def swiglu_forward_and_per_channel_cast_and_transpose(x, fmt, num_per_tokens, round_sf=False,
                                                      without_transpose=False, swiglu_clamp_value=None):
    """SwiGLU of x [T, 2I] (optional clamp), per-channel FP8 quantization, optional transpose.

    Returns (q [I, T] (or [T, I] with without_transpose), sf [T/gm, I] fp32).
    """
    check_swiglu(x, fmt, num_per_tokens, round_sf, without_transpose, swiglu_clamp_value)
    return _run(x, "swiglu", x.shape[1] // 2, num_per_tokens, not without_transpose, round_sf, swiglu_clamp_value)
