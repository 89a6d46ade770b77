"""swiglu_backward_and_per_token_cast and swiglu_backward (tile_kernels 2.1 signatures and return order).

x [N, 2I] (or [B, S, 2I], flattened to N = B*S rows) over the expert-major layout of
the forward: expert e owns rows [align(psum[e-1], A), psum[e]); every other row is
padding and all of its outputs are written as zeros (scales too). Numerics:
kernels/quant/swiglu_backward.py and kernelkiln.torch.swiglu.swiglu_backward.

Also defines the torch.library ops of the swiglu forward and backward pairs, so
that torch.compile sees them as opaque calls with fake (shape-only) implementations
(declared with kernelkiln._ops.library, registered on the first lookup of one).
"""
from typing import Optional

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln._ops.launch import launch
from kernelkiln.quant import _per_token, _swiglu
from kernelkiln_contract.quant_fused import SWIGLU_BACKWARD as CONTRACT

OP = CONTRACT.op
QUANT_FORMATS = ("e4m3",)
CHANNEL_BLOCKS = (32, 128)
FLOAT_FORMATS = {"bf16": (torch.bfloat16, "bfloat16"), "fp32": (torch.float32, "float32")}
_GRAD_DTYPES = (torch.bfloat16, torch.float32)
_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float8_e4m3fn: "float8_e4m3fn"}


def _rows_view(name, t, width):
    """t [..., width] as a 2-D [N, width] view with inner stride 1 and 16-byte aligned rows."""
    if t.dim() not in (2, 3) or t.shape[-1] != width:
        raise ValueError(f"{name} must be 2-D [N, {width}] or 3-D [B, S, {width}], got shape {tuple(t.shape)}")
    try:
        v = t.view(-1, width)
    except RuntimeError:
        raise ValueError(f"{name} of shape {tuple(t.shape)} and strides {tuple(t.stride())} cannot be viewed as "
                         f"[N, {width}] rows; pass a contiguous tensor") from None
    per_16 = 16 // t.element_size()
    if v.shape[0] and (v.stride(1) != 1 or (v.shape[0] > 1 and v.stride(0) % per_16)):
        raise ValueError(f"{name} must have inner stride 1 and a row stride that is a multiple of {per_16} elements "
                         f"(16 bytes); got strides {tuple(t.stride())}")
    checks.aligned(name, v, 16)
    return v


def _hidden_of(name, t):
    if t.dim() not in (2, 3):
        raise ValueError(f"{name} must be 2-D [N, 2I] or 3-D [B, S, 2I], got shape {tuple(t.shape)}")
    two_i = t.shape[-1]
    if two_i % 128 or two_i == 0:
        raise ValueError(f"{name}.shape[-1] must be 2*I with I a positive multiple of 64, got {two_i}")
    return two_i // 2


def _check_common(x2, n, hidden, act_x_grad, psum, topk_weights, routed_scaling_factor, clamp_value, do_recompute):
    checks.tensor("act_x_grad", act_x_grad, _GRAD_DTYPES)
    dy = _rows_view("act_x_grad", act_x_grad, hidden)
    if dy.shape[0] != n:
        raise ValueError(f"act_x_grad must hold N = {n} rows of I = {hidden} (one per row of x), got shape "
                         f"{tuple(act_x_grad.shape)}")
    checks.same_device("act_x_grad", act_x_grad, "x", x2)
    _swiglu._check_routing(x2, n, psum, topk_weights, routed_scaling_factor)
    _swiglu._check_clamp(x2, clamp_value, None)
    checks.flag("do_recompute", do_recompute)
    return dy


def _run(x2, x_sf, dy, n, hidden, fmt_name, g, sf_kind, x_grad, q, sf, weight_grad, act_out, psum, topk_weights,
         routed_scaling_factor, clamp_value, round_sf):
    checks.cuda("x", x2)
    if n == 0:
        return
    sf_t, sf_k = _per_token._sf_strides(sf, sf_kind == "ue8m0") if sf is not None else (0, 0)
    values = CONTRACT.key(x_dtype=_NAMES[x2.dtype], grad_dtype=_NAMES[dy.dtype], fmt=fmt_name, num_per_channels=g,
                          sf_kind=sf_kind)
    rsf = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    clamp_min = config.get_amax_clamp_for_quant("e4m3", False) if sf is not None else 0.0

    def ptr(t):
        return t.data_ptr() if t is not None else 0

    launch(CONTRACT, values, x2.device,
           x=ptr(x2), x_sf=ptr(x_sf), act_x_grad=ptr(dy), weights=ptr(topk_weights), psum=ptr(psum),
           x_grad=ptr(x_grad), q=ptr(q), sf=ptr(sf), weight_grad=ptr(weight_grad), act_out=ptr(act_out),
           num_rows=n, hidden_div64=hidden // 64, x_stride_u=x2.stride(0) * x2.element_size() // 16,
           dy_stride_u=dy.stride(0) * dy.element_size() // 16,
           x_sf_stride=x_sf.stride(0) if x_sf is not None else 0, num_experts=psum.shape[0] if psum is not None else 0,
           alignment=config.get_token_alignment(), with_weight=int(topk_weights is not None), rsf=rsf,
           use_clamp=int(clamp_value is not None), clamp_value=float(clamp_value) if clamp_value is not None else 0.0,
           do_recompute=int(act_out is not None), sf_stride_t=sf_t, sf_stride_k=sf_k, round_sf=int(round_sf),
           clamp_min=clamp_min)


def _check_quant(x, act_x_grad, fmt, num_per_channels, psum, topk_weights, routed_scaling_factor,
                 use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, clamp_value, do_recompute):
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise TypeError(f"x must be a QuantTensor (data, sf) of e4m3 data and fp32 scales, got {type(x).__name__}")
    data, x_sf = x
    checks.tensor("x[0]", data, (torch.float8_e4m3fn,))
    checks.choice("fmt", fmt, QUANT_FORMATS)
    checks.choice("num_per_channels", num_per_channels, CHANNEL_BLOCKS)
    checks.scale_flags(round_sf, use_packed_ue8m0, use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf)
    hidden = _hidden_of("x[0]", data)
    if hidden % num_per_channels:
        raise ValueError(f"I = {hidden} must be a multiple of num_per_channels = {num_per_channels}")
    x2 = _rows_view("x[0]", data, 2 * hidden)
    n = x2.shape[0]
    k = 2 * hidden // num_per_channels
    checks.tensor("x[1]", x_sf, (torch.float32,), ndim=2)
    if tuple(x_sf.shape) != (n, k) or (k > 1 and x_sf.stride(1) != 1):
        raise ValueError(f"x[1] (the input scales) must be a row-major float32 tensor of shape (N, 2I/g) = {(n, k)}, "
                         f"got shape {tuple(x_sf.shape)}, strides {tuple(x_sf.stride())}")
    checks.same_device("x[1]", x_sf, "x[0]", data)
    dy = _check_common(x2, n, hidden, act_x_grad, psum, topk_weights, routed_scaling_factor, clamp_value,
                       do_recompute)
    return x2, x_sf, dy, n, hidden


def _alloc_quant(n, hidden, g, col, packed, with_weight, do_recompute, device):
    sf_kind = "ue8m0" if packed else "fp32"
    x_grad = torch.empty((n, 2 * hidden), dtype=torch.bfloat16, device=device)
    q = torch.empty((n, 2 * hidden), dtype=torch.float8_e4m3fn, device=device)
    sf = _per_token._sf_storage(n, 2 * hidden // g, _per_token._SF_DTYPE[sf_kind], col, device, packed)
    wg = torch.empty((n,), dtype=torch.float32, device=device) if with_weight else None
    act_out = torch.empty((n, hidden), dtype=torch.bfloat16, device=device) if do_recompute else None
    return sf_kind, x_grad, q, sf, wg, act_out


def _result(x_grad, quant, wg, act_out):
    result = [x_grad]
    if quant is not None:
        result.append(quant)
    if wg is not None:
        result.append(wg)
    if act_out is not None:
        result.append(act_out)
    return tuple(result)


def _eager_quant(x, act_x_grad, fmt, num_per_channels, psum_num_tokens_per_expert=None, topk_weights=None,
                 routed_scaling_factor=None, use_tma_aligned_col_major_sf=False, round_sf=False,
                 use_packed_ue8m0=False, clamp_value=None, do_recompute=False):
    x2, x_sf, dy, n, hidden = _check_quant(x, act_x_grad, fmt, num_per_channels, psum_num_tokens_per_expert,
                                           topk_weights, routed_scaling_factor, use_tma_aligned_col_major_sf,
                                           round_sf, use_packed_ue8m0, clamp_value, do_recompute)
    sf_kind, x_grad, q, sf, wg, act_out = _alloc_quant(n, hidden, num_per_channels, use_tma_aligned_col_major_sf,
                                                       use_packed_ue8m0, topk_weights is not None, do_recompute,
                                                       x2.device)
    _run(x2, x_sf, dy, n, hidden, "e4m3", num_per_channels, sf_kind, x_grad, q, sf, wg, act_out,
         psum_num_tokens_per_expert, topk_weights, routed_scaling_factor, clamp_value, round_sf)
    return _result(x_grad, (q, sf), wg, act_out)


def _check_float(x, act_x_grad, fmt, psum, topk_weights, routed_scaling_factor, clamp_value, do_recompute):
    checks.tensor("x", x, tuple(FLOAT_FORMATS[f][0] for f in FLOAT_FORMATS))
    checks.choice("fmt", fmt, tuple(FLOAT_FORMATS))
    if isinstance(act_x_grad, torch.Tensor) and act_x_grad.dtype != x.dtype:
        raise TypeError(f"act_x_grad has dtype {act_x_grad.dtype}; it must match x ({x.dtype})")
    hidden = _hidden_of("x", x)
    x2 = _rows_view("x", x, 2 * hidden)
    n = x2.shape[0]
    dy = _check_common(x2, n, hidden, act_x_grad, psum, topk_weights, routed_scaling_factor, clamp_value,
                       do_recompute)
    return x2, dy, n, hidden


def _eager_float(x, act_x_grad, fmt, psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                 clamp_value=None, do_recompute=False):
    x2, dy, n, hidden = _check_float(x, act_x_grad, fmt, psum_num_tokens_per_expert, topk_weights,
                                     routed_scaling_factor, clamp_value, do_recompute)
    dtype, name = FLOAT_FORMATS[fmt]
    x_grad = torch.empty((n, 2 * hidden), dtype=dtype, device=x.device)
    wg = torch.empty((n,), dtype=torch.float32, device=x.device) if topk_weights is not None else None
    act_out = torch.empty((n, hidden), dtype=dtype, device=x.device) if do_recompute else None
    _run(x2, None, dy, n, hidden, name, 0, "none", x_grad, None, None, wg, act_out, psum_num_tokens_per_expert,
         topk_weights, routed_scaling_factor, clamp_value, False)
    return _result(x_grad, None, wg, act_out)


def _opt_float(v):
    # Schema floats: a Python int is passed as float; anything else goes through unchanged
    # and is rejected by the eager checks with the usual message.
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def _empty(device):
    return torch.empty(0, dtype=torch.float32, device=device)


# ---- torch.library ops. Optional outputs are returned as empty tensors (fixed schema). ----

# ---- torch.library ops (declared here, registered on the first lookup of one in torch.ops.kernelkiln) ----

@library_op("swiglu_backward_and_per_token_cast", mutates_args=())
def _swiglu_backward_and_per_token_cast_op(
        x_data: torch.Tensor, x_sf: torch.Tensor, act_x_grad: torch.Tensor, fmt: str, num_per_channels: int,
        psum_num_tokens_per_expert: Optional[torch.Tensor], topk_weights: Optional[torch.Tensor],
        routed_scaling_factor: Optional[float], use_tma_aligned_col_major_sf: bool, round_sf: bool,
        use_packed_ue8m0: bool, clamp_value: Optional[float], do_recompute: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r = _eager_quant((x_data, x_sf), act_x_grad, fmt, num_per_channels, psum_num_tokens_per_expert, topk_weights,
                     routed_scaling_factor, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, clamp_value,
                     do_recompute)
    wg = r[2] if topk_weights is not None else _empty(x_data.device)
    act_out = r[-1] if do_recompute else _empty(x_data.device)
    return r[0], r[1][0], r[1][1], wg, act_out


@_swiglu_backward_and_per_token_cast_op.register_fake
def _swiglu_backward_and_per_token_cast_op_fake(x_data, x_sf, act_x_grad, fmt, num_per_channels,
                                                psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                                                use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, clamp_value,
                                                do_recompute):
    checks.choice("fmt", fmt, QUANT_FORMATS)
    checks.choice("num_per_channels", num_per_channels, CHANNEL_BLOCKS)
    checks.scale_flags(round_sf, use_packed_ue8m0)
    hidden = _hidden_of("x[0]", x_data)
    n = x_data.numel() // (2 * hidden)
    _, x_grad, q, sf, wg, act_out = _alloc_quant(n, hidden, num_per_channels, use_tma_aligned_col_major_sf,
                                                 use_packed_ue8m0, topk_weights is not None, do_recompute,
                                                 x_data.device)
    return (x_grad, q, sf, wg if wg is not None else _empty(x_data.device),
            act_out if act_out is not None else _empty(x_data.device))


@library_op("swiglu_backward", mutates_args=())
def _swiglu_backward_op(
        x: torch.Tensor, act_x_grad: torch.Tensor, fmt: str, psum_num_tokens_per_expert: Optional[torch.Tensor],
        topk_weights: Optional[torch.Tensor], routed_scaling_factor: Optional[float], clamp_value: Optional[float],
        do_recompute: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r = _eager_float(x, act_x_grad, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                     clamp_value, do_recompute)
    wg = r[1] if topk_weights is not None else _empty(x.device)
    act_out = r[-1] if do_recompute else _empty(x.device)
    return r[0], wg, act_out


@_swiglu_backward_op.register_fake
def _swiglu_backward_op_fake(x, act_x_grad, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                             clamp_value, do_recompute):
    checks.choice("fmt", fmt, tuple(FLOAT_FORMATS))
    hidden = _hidden_of("x", x)
    n = x.numel() // (2 * hidden)
    dtype = FLOAT_FORMATS[fmt][0]
    return (torch.empty((n, 2 * hidden), dtype=dtype, device=x.device),
            torch.empty((n,), dtype=torch.float32, device=x.device) if topk_weights is not None else _empty(x.device),
            torch.empty((n, hidden), dtype=dtype, device=x.device) if do_recompute else _empty(x.device))


@library_op("swiglu_forward_and_per_token_cast", mutates_args=("clamped_count",))
def _swiglu_forward_and_per_token_cast_op(
        x: torch.Tensor, fmt: str, num_per_channels: int, psum_num_tokens_per_expert: Optional[torch.Tensor],
        topk_weights: Optional[torch.Tensor], routed_scaling_factor: Optional[float],
        use_tma_aligned_col_major_sf: bool, round_sf: bool, use_packed_ue8m0: bool, clamp_value: Optional[float],
        clamped_count: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return _swiglu.swiglu_forward_and_per_token_cast(x, fmt, num_per_channels, psum_num_tokens_per_expert,
                                                     topk_weights, routed_scaling_factor,
                                                     use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
                                                     clamp_value, clamped_count)


@_swiglu_forward_and_per_token_cast_op.register_fake
def _swiglu_forward_and_per_token_cast_op_fake(x, fmt, num_per_channels, psum_num_tokens_per_expert, topk_weights,
                                               routed_scaling_factor, use_tma_aligned_col_major_sf, round_sf,
                                               use_packed_ue8m0, clamp_value, clamped_count):
    checks.choice("fmt", fmt, _swiglu.QUANT_FORMATS)
    checks.choice("num_per_channels", num_per_channels, _swiglu.CHANNEL_BLOCKS)
    checks.scale_flags(round_sf, use_packed_ue8m0)
    n, hidden = x.shape[0], x.shape[1] // 2
    kind = "ue8m0" if use_packed_ue8m0 else "fp32"
    q = torch.empty((n, hidden), dtype=torch.float8_e4m3fn, device=x.device)
    sf = _per_token._sf_storage(n, -(-hidden // num_per_channels), _per_token._SF_DTYPE[kind],
                                use_tma_aligned_col_major_sf, x.device, kind == "ue8m0")
    return q, sf


@library_op("swiglu_forward", mutates_args=("clamped_count",))
def _swiglu_forward_op(x: torch.Tensor, fmt: str, psum_num_tokens_per_expert: Optional[torch.Tensor],
                       topk_weights: Optional[torch.Tensor], routed_scaling_factor: Optional[float],
                       clamp_value: Optional[float], clamped_count: Optional[torch.Tensor]) -> torch.Tensor:
    return _swiglu.swiglu_forward(x, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                                  clamp_value, clamped_count)


@_swiglu_forward_op.register_fake
def _swiglu_forward_op_fake(x, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor, clamp_value, clamped_count):
    checks.choice("fmt", fmt, tuple(_swiglu.FLOAT_FORMATS))
    return torch.empty((x.shape[0], x.shape[1] // 2), dtype=_swiglu.FLOAT_FORMATS[fmt][0], device=x.device)


# ---- public API ----

def swiglu_forward_and_per_token_cast(x, fmt, num_per_channels, psum_num_tokens_per_expert=None, topk_weights=None,
                                      routed_scaling_factor=None, use_tma_aligned_col_major_sf=False,
                                      round_sf=False, use_packed_ue8m0=False, clamp_value=None, clamped_count=None):
    """SwiGLU then per-token e4m3 quantization (1 x num_per_channels blocks); returns (data, sf).

    Same signature and outputs as tile_kernels 2.1 ``quant.swiglu_forward_and_per_token_cast``.
    Under ``torch.compile`` it goes through ``kernelkiln::swiglu_forward_and_per_token_cast``.
    """
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.swiglu_forward_and_per_token_cast(
            x, fmt, num_per_channels, psum_num_tokens_per_expert, topk_weights, _opt_float(routed_scaling_factor),
            use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, _opt_float(clamp_value), clamped_count)
    return _swiglu.swiglu_forward_and_per_token_cast(x, fmt, num_per_channels, psum_num_tokens_per_expert,
                                                     topk_weights, routed_scaling_factor,
                                                     use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
                                                     clamp_value, clamped_count)


def swiglu_forward(x, fmt, psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                   clamp_value=None, clamped_count=None):
    """SwiGLU without quantization: fmt 'bf16' or 'fp32' output [N, I] (tile_kernels 2.1 ``quant.swiglu_forward``).

    Under ``torch.compile`` it goes through ``kernelkiln::swiglu_forward``.
    """
    if torch.compiler.is_compiling():
        return torch.ops.kernelkiln.swiglu_forward(x, fmt, psum_num_tokens_per_expert, topk_weights,
                                                 _opt_float(routed_scaling_factor), _opt_float(clamp_value),
                                                 clamped_count)
    return _swiglu.swiglu_forward(x, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                                  clamp_value, clamped_count)


def swiglu_backward_and_per_token_cast(x, act_x_grad, fmt, num_per_channels, psum_num_tokens_per_expert=None,
                                       topk_weights=None, routed_scaling_factor=None,
                                       use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False,
                                       clamp_value=None, do_recompute=False):
    """SwiGLU backward from FP8 input x = (e4m3 [N, 2I], fp32 sf [N, 2I/g]) with per-token cast of the gradient.

    Same signature and return order as tile_kernels 2.1: ``(x_grad [N, 2I] bf16, (x_grad_fp8 [N, 2I]
    e4m3, sf), weight_grad [N] fp32 if topk_weights, act_out [N, I] bf16 if do_recompute)``. The input
    scales use the same 1 x num_per_channels blocks as the output. x_grad_fp8/sf are bit-identical to
    ``per_token_cast`` of the fp32 gradient. Under ``torch.compile`` the call goes through
    ``kernelkiln::swiglu_backward_and_per_token_cast``.
    """
    if torch.compiler.is_compiling() and isinstance(x, (tuple, list)) and len(x) == 2:
        r = torch.ops.kernelkiln.swiglu_backward_and_per_token_cast(
            x[0], x[1], act_x_grad, fmt, num_per_channels, psum_num_tokens_per_expert, topk_weights,
            _opt_float(routed_scaling_factor), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
            _opt_float(clamp_value), do_recompute)
        return _result(r[0], (r[1], r[2]), r[3] if topk_weights is not None else None,
                       r[4] if do_recompute else None)
    return _eager_quant(x, act_x_grad, fmt, num_per_channels, psum_num_tokens_per_expert, topk_weights,
                        routed_scaling_factor, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, clamp_value,
                        do_recompute)


def swiglu_backward(x, act_x_grad, fmt, psum_num_tokens_per_expert=None, topk_weights=None,
                    routed_scaling_factor=None, clamp_value=None, do_recompute=False):
    """Unquantized SwiGLU backward: x and act_x_grad bf16/fp32 (same dtype), fmt 'bf16' or 'fp32'.

    Returns ``(x_grad [N, 2I], weight_grad [N] fp32 if topk_weights, act_out [N, I] if do_recompute)``
    in fmt's dtype (tile_kernels 2.1 ``quant.swiglu_backward``). Under ``torch.compile`` the call goes
    through ``kernelkiln::swiglu_backward``.
    """
    if torch.compiler.is_compiling():
        r = torch.ops.kernelkiln.swiglu_backward(x, act_x_grad, fmt, psum_num_tokens_per_expert, topk_weights,
                                               _opt_float(routed_scaling_factor), _opt_float(clamp_value),
                                               do_recompute)
        return _result(r[0], None, r[1] if topk_weights is not None else None, r[2] if do_recompute else None)
    return _eager_float(x, act_x_grad, fmt, psum_num_tokens_per_expert, topk_weights, routed_scaling_factor,
                        clamp_value, do_recompute)
