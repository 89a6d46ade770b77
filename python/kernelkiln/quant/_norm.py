"""RMSNorm forward (+ per-token 1x32 e4m3 cast) and backward (tile_kernels 2.1 signatures).

Numerics and summation orders: kernels/quant/norm_forward.py, norm_backward.py and the
reference kernelkiln.torch.norm (bit-identical). eps and out_scale are kernel arguments.
"""
import numbers

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.quant._per_token import _sf_storage
from kernelkiln_contract.quant_fused import NORM_BACKWARD, NORM_FORWARD

MAX_HIDDEN = 8192
GROUP = 32
# norm_backward's persistent grid: P = CTAS_PER_SM[x.dtype] * get_num_sms() partial rows; the
# main kernel's register use (sm_90a: 254 for bf16 x 128 threads, 157 for fp32 x 256) lets
# that many CTAs be resident per SM, so the whole grid runs in one wave.
CTAS_PER_SM = {torch.bfloat16: 2, torch.float32: 1}
_DTYPES = (torch.bfloat16, torch.float32)
_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_MEGA_MOE_ROWS = {}  # (tokens, block_m, device) -> (int64 rows on the device, rows the buffer needs)


def _check_mega_moe(mega_moe_sf, mega_moe_block_m, round_sf, x, n):
    """Validate the MegaMoE scale buffer; returns (rows, needed) or None when it is not requested."""
    if mega_moe_sf is None:
        if mega_moe_block_m != 0:
            raise ValueError(f"mega_moe_block_m={mega_moe_block_m!r} needs a mega_moe_sf buffer; pass both or neither")
        return None
    if isinstance(mega_moe_block_m, bool) or not isinstance(mega_moe_block_m, numbers.Integral) \
            or mega_moe_block_m <= 0:
        raise ValueError(f"mega_moe_block_m must be a positive int with mega_moe_sf, got {mega_moe_block_m!r}")
    if not round_sf:
        raise ValueError("mega_moe_sf holds packed UE8M0 scales: it requires round_sf=True")
    h = x.shape[-1]
    if h % 128:
        raise ValueError(f"mega_moe_sf requires a hidden size that is a multiple of 128, got {h}")
    checks.tensor("mega_moe_sf", mega_moe_sf, (torch.int32,), ndim=2)
    checks.same_device("mega_moe_sf", mega_moe_sf, "x", x)
    key = (n, int(mega_moe_block_m), x.device)
    if key not in _MEGA_MOE_ROWS:
        if len(_MEGA_MOE_ROWS) >= 256:  # token counts vary call to call in serving: keep the cache bounded
            _MEGA_MOE_ROWS.clear()
        from kernelkiln._formats import mega_moe_sf_rows
        _MEGA_MOE_ROWS[key] = mega_moe_sf_rows(n, int(mega_moe_block_m), x.device)
    rows, needed = _MEGA_MOE_ROWS[key]
    if mega_moe_sf.shape[1] != h // 128 or mega_moe_sf.shape[0] < needed:
        raise ValueError(f"mega_moe_sf must be int32 of shape [>= {needed}, {h // 128}] for {n} tokens in chunks of "
                         f"{mega_moe_block_m} (each padded to 128 rows); got {tuple(mega_moe_sf.shape)}")
    return rows, needed


def _vec(dtype):
    return 16 // dtype.itemsize


def _ceil_div(a, b):
    return -(-a // b)


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    return float(value)


def _check_rows(name, t, vec, ref_shape):
    """Inner stride 1, other strides multiples of vec elements, base 16-byte aligned."""
    if tuple(t.shape) != tuple(ref_shape):
        raise ValueError(f"{name} must have shape {tuple(ref_shape)}, got {tuple(t.shape)}")
    if t.stride(-1) != 1 or any(s % vec for d, s in zip(t.shape[:-1], t.stride()[:-1]) if d > 1):
        raise ValueError(f"{name} must have inner stride 1 and other strides that are multiples of {vec} elements; "
                         f"got strides {tuple(t.stride())}")
    checks.aligned(name, t, 16)


def _row_strides(t, vec):
    """(batch, token) strides in units of vec for a 2-D or 3-D tensor."""
    if t.dim() == 2:
        return 0, t.stride(0) // vec
    return t.stride(0) // vec, t.stride(1) // vec


def _check_out(name, t, x, dtype):
    """A preallocated output: x's shape, ``dtype``, rows addressable as n * stride (n = b*T + t).

    The kernel writes it in chunks of VEC(x) elements, so its row stride is a multiple of that.
    """
    checks.tensor(name, t, (dtype,), ndim=x.dim())
    checks.same_device(name, t, "x", x)
    _check_rows(name, t, _vec(x.dtype), x.shape)
    if t.dim() == 3 and t.shape[1] > 1 and t.shape[0] > 1 and t.stride(0) != t.shape[1] * t.stride(1):
        raise ValueError(f"{name} must have stride(0) == shape(1) * stride(1) (rows evenly spaced); "
                         f"got shape {tuple(t.shape)}, strides {tuple(t.stride())}")


def _flat_row_stride(t):
    """Stride between consecutive flattened rows n = b*T + t (checked to exist by _check_out)."""
    if t.dim() == 3 and t.shape[1] == 1:
        return t.stride(0)
    return t.stride(-2)


def _check_inputs(x, weight, eps, residual, out_scale):
    checks.tensor("x", x, _DTYPES)
    if x.dim() not in (2, 3):
        raise ValueError(f"x must be 2-D [T, H] or 3-D [B, T, H], got shape {tuple(x.shape)}")
    h = x.shape[-1]
    if h == 0 or h % 16 or h > MAX_HIDDEN:
        raise ValueError(f"x.shape[-1] (hidden) must be a positive multiple of 16 and <= {MAX_HIDDEN}, got {h}")
    vec = _vec(x.dtype)
    _check_rows("x", x, vec, x.shape)
    if weight is not None:
        checks.tensor("weight", weight, (x.dtype,), ndim=1)
        if weight.shape[0] != h or weight.stride(0) != 1:
            raise ValueError(f"weight must be a contiguous [{h}] tensor, got shape {tuple(weight.shape)}, "
                             f"strides {tuple(weight.stride())}")
        checks.same_device("weight", weight, "x", x)
        checks.aligned("weight", weight, 16)
    if residual is not None:
        checks.tensor("residual", residual, (x.dtype,), ndim=x.dim())
        checks.same_device("residual", residual, "x", x)
        _check_rows("residual", residual, vec, x.shape)
    return _number("eps", eps), _number("out_scale", out_scale)


def _alloc_like(x, dtype):
    return torch.empty(x.shape, dtype=dtype, device=x.device)


def _forward(x, weight, eps, residual, out_scale, y, residual_out, rstd, out_kind, q=None, sf=None, sf_strides=(0, 0),
             round_sf=False, clamp=0.0):
    """Launch norm_forward. Outputs are given (allocated or user tensors); y may be None (cast only)."""
    b, t = (1, x.shape[0]) if x.dim() == 2 else (x.shape[0], x.shape[1])
    if b * t == 0:
        return
    vec = _vec(x.dtype)
    xb, xt = _row_strides(x, vec)
    rb, rt = _row_strides(residual, vec) if residual is not None else (0, 0)
    launch(NORM_FORWARD, NORM_FORWARD.key(x_dtype=_NAMES[x.dtype], out_kind=out_kind), x.device,
           x=x.data_ptr(), residual=residual.data_ptr() if residual is not None else 0,
           weight=weight.data_ptr() if weight is not None else 0, y=y.data_ptr() if y is not None else 0,
           residual_out=residual_out.data_ptr() if residual_out is not None else 0,
           rstd=rstd.data_ptr() if rstd is not None else 0, q=q.data_ptr() if q is not None else 0,
           sf=sf.data_ptr() if sf is not None else 0, num_tokens=t, batch=b, hidden=x.shape[-1],
           x_stride_b=xb, x_stride_t=xt, r_stride_b=rb, r_stride_t=rt,
           y_stride=_flat_row_stride(y) // vec if y is not None else 0,
           ro_stride=_flat_row_stride(residual_out) // vec if residual_out is not None else 0,
           q_stride=_flat_row_stride(q) // vec if q is not None else 0,
           sf_stride_t=sf_strides[0], sf_stride_k=sf_strides[1], has_residual=int(residual is not None),
           has_weight=int(weight is not None), write_y=int(y is not None), write_rstd=int(rstd is not None),
           round_sf=int(round_sf), eps=eps, out_scale=out_scale, clamp_min=clamp)


def norm_forward(x, weight, eps, residual=None, out_scale=1.0, out=None, residual_out=None, with_rstd=False):
    """RMSNorm with optional fused residual add; returns ``(out, rstd or None, norm_input)``."""
    eps, out_scale = _check_inputs(x, weight, eps, residual, out_scale)
    checks.flag("with_rstd", with_rstd)
    if residual_out is not None and residual is None:
        raise ValueError("residual_out is given but residual is None; residual_out holds x + residual")
    if out is not None:
        _check_out("out", out, x, x.dtype)
    if residual_out is not None:
        _check_out("residual_out", residual_out, x, x.dtype)
    checks.cuda("x", x)
    y = out if out is not None else _alloc_like(x, x.dtype)
    ro = None
    if residual is not None:
        ro = residual_out if residual_out is not None else _alloc_like(x, x.dtype)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if with_rstd else None
    _forward(x, weight, eps, residual, out_scale, y, ro, rstd, "plain")
    return y, rstd, (ro if ro is not None else x)


def norm_forward_and_per_token_cast(x, weight, eps, fmt, num_per_channels, residual=None, out_scale=1.0,
                                   use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False,
                                   with_out_bf16=False, out=None, out_bf16=None, residual_out=None, mega_moe_sf=None,
                                   mega_moe_block_m=0, with_rstd=False):
    """RMSNorm (+ residual), y rounded to x.dtype, then per-token 1x32 e4m3 quantization of y.

    Returns ``((q, sf), out_bf16 or None, rstd or None, norm_input)``; bit-equal to
    ``per_token_cast(norm_forward(x)[0], 'e4m3', 32, ...)``.
    """
    eps, out_scale = _check_inputs(x, weight, eps, residual, out_scale)
    checks.choice("fmt", fmt, ("e4m3",))
    checks.choice("num_per_channels", num_per_channels, (GROUP,))
    checks.scale_flags(round_sf, use_packed_ue8m0, use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf,
                       with_out_bf16=with_out_bf16, with_rstd=with_rstd)
    if out_bf16 is not None and not with_out_bf16:
        raise ValueError("out_bf16 is given but with_out_bf16=False; set with_out_bf16=True to write it")
    if residual_out is not None and residual is None:
        raise ValueError("residual_out is given but residual is None; residual_out holds x + residual")
    h = x.shape[-1]
    lead = tuple(x.shape[:-1])
    n = 1
    for d in lead:
        n *= d
    k_blocks = _ceil_div(h, GROUP)
    k = _ceil_div(k_blocks, 4) if use_packed_ue8m0 else k_blocks
    sf_dtype = torch.int32 if use_packed_ue8m0 else torch.float32
    mega = _check_mega_moe(mega_moe_sf, mega_moe_block_m, round_sf, x, n)
    if out is not None:
        q, sf = checks.out_pair(out, use_tma_aligned_col_major_sf)
        _check_out("out[0]", q, x, torch.float8_e4m3fn)
        checks.tensor("out[1]", sf, (sf_dtype,))
        checks.same_device("out[1]", sf, "x", x)
        if tuple(sf.shape) != lead + (k,) or not sf.is_contiguous():
            raise ValueError(f"out[1] must be a contiguous {sf_dtype} tensor of shape {lead + (k,)}; got shape "
                             f"{tuple(sf.shape)}, strides {tuple(sf.stride())}")
    if out_bf16 is not None:
        _check_out("out_bf16", out_bf16, x, torch.bfloat16)
    if residual_out is not None:
        _check_out("residual_out", residual_out, x, x.dtype)
    checks.cuda("x", x)

    if out is not None:
        if use_packed_ue8m0 and k_blocks % 4:
            sf.zero_()  # the kernel writes only real scale bytes; pad bytes are defined as 0
        sf2d = sf.view(n, k)
    else:
        q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        sf2d = _sf_storage(n, k_blocks, sf_dtype, use_tma_aligned_col_major_sf, x.device, use_packed_ue8m0)
        sf = sf2d.view(lead + (k,))
    s0, s1 = sf2d.stride()
    sf_strides = (4 * s0, 4 * s1) if use_packed_ue8m0 else (s0, s1)
    y = None
    if with_out_bf16:
        y = out_bf16 if out_bf16 is not None else torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    ro = None
    if residual is not None:
        ro = residual_out if residual_out is not None else _alloc_like(x, x.dtype)
    rstd = torch.empty(lead, dtype=torch.float32, device=x.device) if with_rstd else None
    kind = "e4m3_ue8m0" if use_packed_ue8m0 else "e4m3_fp32"
    _forward(x, weight, eps, residual, out_scale, y, ro, rstd, kind, q, sf2d, sf_strides, round_sf,
             config.get_amax_clamp_for_quant("e4m3", False))
    if mega is not None and n:
        # The MegaMoE copy of the packed UE8M0 scales: one index_copy_ of T x H/128 words after the kernel (the
        # peer writes them from the kernel; here it costs 6.8 us at T = 16384, H = 7168 on the H200).
        from kernelkiln._formats import pack_ue8m0
        mega_moe_sf.index_copy_(0, mega[0], sf2d if use_packed_ue8m0 else pack_ue8m0(sf2d))
    return (q, sf), y, rstd, (ro if ro is not None else x)


def norm_backward_num_partials(dtype=torch.bfloat16):
    """P, the number of weight-gradient partial rows (and CTAs) norm_backward uses now for x of ``dtype``."""
    return CTAS_PER_SM[dtype] * config.get_num_sms()


def norm_backward(out_grad, x, weight, rstd, residual_out_grad=None, out_scale=1.0, weight_grad=None):
    """RMSNorm backward; returns ``(x_grad [T, H] x.dtype contiguous, weight_grad [H] or None)``.

    weight_grad (bf16/fp32), when given, is accumulated in place and returned; otherwise a new
    tensor of weight.dtype is returned. The weight gradient is deterministic: fixed-order
    per-CTA partials and a fixed-order reduction (kernels/quant/norm_backward.py).
    """
    checks.tensor("x", x, _DTYPES, ndim=2)
    t, h = x.shape
    if h == 0 or h % 32 or h > MAX_HIDDEN:
        raise ValueError(f"x.shape[1] (hidden) must be a positive multiple of 32 and <= {MAX_HIDDEN}, got {h}")
    vec = _vec(x.dtype)
    _check_rows("x", x, vec, (t, h))
    checks.tensor("out_grad", out_grad, (x.dtype,), ndim=2)
    checks.same_device("out_grad", out_grad, "x", x)
    _check_rows("out_grad", out_grad, vec, (t, h))
    checks.tensor("rstd", rstd, (torch.float32,), ndim=1)
    if rstd.shape[0] != t or (t > 1 and rstd.stride(0) != 1):
        raise ValueError(f"rstd must be a contiguous fp32 [{t}] tensor, got shape {tuple(rstd.shape)}")
    checks.same_device("rstd", rstd, "x", x)
    if weight is not None:
        checks.tensor("weight", weight, (x.dtype,), ndim=1)
        if weight.shape[0] != h or weight.stride(0) != 1:
            raise ValueError(f"weight must be a contiguous [{h}] tensor, got shape {tuple(weight.shape)}")
        checks.same_device("weight", weight, "x", x)
        checks.aligned("weight", weight, 16)
    if residual_out_grad is not None:
        checks.tensor("residual_out_grad", residual_out_grad, (x.dtype,), ndim=2)
        checks.same_device("residual_out_grad", residual_out_grad, "x", x)
        _check_rows("residual_out_grad", residual_out_grad, vec, (t, h))
    out_scale = _number("out_scale", out_scale)
    if weight_grad is not None:
        if weight is None:
            raise ValueError("weight_grad is given but weight is None (there is no weight gradient)")
        checks.tensor("weight_grad", weight_grad, _DTYPES, ndim=1)
        if weight_grad.shape[0] != h or weight_grad.stride(0) != 1:
            raise ValueError(f"weight_grad must be a contiguous [{h}] tensor, got shape {tuple(weight_grad.shape)}")
        checks.same_device("weight_grad", weight_grad, "x", x)
    checks.cuda("x", x)

    dx = torch.empty((t, h), dtype=x.dtype, device=x.device)
    accumulate = weight_grad is not None
    wg = None
    if weight is not None:
        wg = weight_grad if accumulate else torch.empty(h, dtype=weight.dtype, device=x.device)
    if t == 0:
        if wg is not None and not accumulate:
            wg.zero_()
        return dx, wg
    p = norm_backward_num_partials(x.dtype)
    partial = torch.empty((p, h), dtype=torch.float32, device=x.device)
    launch(NORM_BACKWARD, NORM_BACKWARD.key(stage="main", dtype=_NAMES[x.dtype]), x.device,
           dy=out_grad.data_ptr(), x=x.data_ptr(), weight=weight.data_ptr() if weight is not None else 0,
           rstd=rstd.data_ptr(), rog=residual_out_grad.data_ptr() if residual_out_grad is not None else 0,
           dx=dx.data_ptr(), partial=partial.data_ptr(), num_tokens=t, hidden=h, num_ctas=p,
           dy_stride=out_grad.stride(0) // vec, x_stride=x.stride(0) // vec,
           rog_stride=residual_out_grad.stride(0) // vec if residual_out_grad is not None else 0, dx_stride=h // vec,
           has_weight=int(weight is not None), has_rog=int(residual_out_grad is not None), out_scale=out_scale)
    if wg is not None:
        launch(NORM_BACKWARD, NORM_BACKWARD.key(stage="reduce", dtype=_NAMES[wg.dtype]), x.device,
               partial=partial.data_ptr(), weight_grad=wg.data_ptr(), hidden=h, num_partials=p,
               accumulate=int(accumulate))
    return dx, wg
