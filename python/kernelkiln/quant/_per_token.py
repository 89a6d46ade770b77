"""per_token_cast and its sf-only / precomputed-sf variants (tile_kernels 2.1 signatures).

Output layouts follow docs/SPEC.md §2.1: e4m3 data [T, H] or packed e2m1 int8
[T, H/2]; scales fp32 / e4m3 [T, ceil(H/g)] or UE8M0 packed four per int32,
optionally TMA-aligned column-major (logical shape, strides (1, A)).
"""
from typing import NamedTuple

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import kernel, launch, raw_stream
from kernelkiln._ops.outputs import RowOutputs
from kernelkiln_contract.quant import PER_TOKEN_CAST as CONTRACT
from kernelkiln_contract.quant import PER_TOKEN_ROWS as ROWS  # noqa: F401  (tuning scripts override it)
from kernelkiln_contract.quant import per_token_rows as rows_for

OP = CONTRACT.op


_PLAIN_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_QUANT_DATA = {torch.float8_e4m3fn: "float8_e4m3fn", torch.int8: "e2m1"}
_IN_SF_KIND = {torch.float32: "fp32", torch.float8_e4m3fn: "e4m3", torch.int32: "ue8m0"}


class _Source(NamedTuple):
    """A validated input: the tensor the kernel reads and what the kernel needs to know about it."""
    data: torch.Tensor
    t: int
    h: int  # logical hidden size
    in_dtype: str  # kernel in_dtype
    vec: int  # elements per thread and row
    stride_vec: int  # row stride in units of vec elements (packed FP4: 4-byte words)
    scales: tuple = None  # pre-quantized input: (x_sf, in_sf_kind, stride_t, stride_k, gm, gk)
FORMATS = ("e4m3", "e2m1")
CHANNEL_BLOCKS = (16, 32, 64, 128)
_IN_DTYPES = (torch.bfloat16, torch.float32)


def _ceil_div(a, b):
    return -(-a // b)


def _check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf, use_tma_aligned_col_major_sf):
    checks.choice("fmt", fmt, FORMATS)
    checks.choice("num_per_channels", num_per_channels, CHANNEL_BLOCKS)
    checks.scale_flags(round_sf, use_packed_ue8m0, use_e4m3_sf=use_e4m3_sf,
                       use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf)
    if round_sf and use_e4m3_sf:
        raise ValueError("round_sf and use_e4m3_sf cannot both be set (power-of-two vs E4M3 scales)")


def _check_x(x, x_block_size=None):
    if isinstance(x, (tuple, list)):
        return _check_quantized_x(x, x_block_size)
    if x_block_size is not None:
        raise ValueError("x_block_size is only meaningful for pre-quantized input x = (data, sf)")
    checks.tensor("x", x, _IN_DTYPES, ndim=2)
    t, h = x.shape
    _check_hidden(h, "x.shape[1] (hidden)")
    vec = 8 if x.dtype == torch.bfloat16 else 4
    if x.stride(1) != 1 or (t > 1 and x.stride(0) % vec):
        raise ValueError(f"x must have inner stride 1 and a row stride that is a multiple of {vec} elements "
                         f"(16 bytes); got strides {tuple(x.stride())}")
    checks.aligned("x", x, 16)
    return _Source(x, t, h, _PLAIN_NAMES[x.dtype], vec, x.stride(0) // vec)


def _check_hidden(h, what):
    if h % 64 or h == 0:
        raise ValueError(f"{what} must be a positive multiple of 64, got {h}")


def _check_quantized_x(x, x_block_size):
    """x = (e4m3 data [T, H] or packed e2m1 int8 [T, H/2], scales over x_block_size = (gm, gk))."""
    if len(x) != 2:
        raise TypeError("pre-quantized x must be a (data, sf) pair")
    if x_block_size is None:
        raise ValueError("x_block_size (gm, gk) is required when x is a (data, sf) pair")
    if not (isinstance(x_block_size, (tuple, list)) and len(x_block_size) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) for v in x_block_size)):
        raise TypeError(f"x_block_size must be a (gm, gk) pair of ints, got {x_block_size!r}")
    gm, gk = x_block_size
    if gm < 1 or gk < 8 or gk % 8:
        raise ValueError(f"x_block_size must have gm >= 1 and gk a positive multiple of 8, got {x_block_size}")
    data, x_sf = x
    checks.tensor("x[0] (data)", data, tuple(_QUANT_DATA), ndim=2)
    checks.tensor("x[1] (sf)", x_sf, tuple(_IN_SF_KIND), ndim=2)
    fp4 = data.dtype == torch.int8
    t, h = data.shape[0], data.shape[1] * (2 if fp4 else 1)
    _check_hidden(h, "the logical hidden size of x[0]")
    unit = 4 if fp4 else 8  # bytes each thread loads per row
    if data.stride(1) != 1 or (t > 1 and data.stride(0) % unit):
        raise ValueError(f"x[0] must have inner stride 1 and a row stride that is a multiple of {unit} bytes; "
                         f"got strides {tuple(data.stride())}")
    checks.aligned("x[0] (data)", data, unit)
    kind = _IN_SF_KIND[x_sf.dtype]
    mb, kb = _ceil_div(t, gm), _ceil_div(h, gk)
    expected = (mb, _ceil_div(kb, 4)) if kind == "ue8m0" else (mb, kb)
    if tuple(x_sf.shape) != expected:
        raise ValueError(f"x[1] (sf, {x_sf.dtype}) must have shape {expected} for x_block_size {tuple(x_block_size)}"
                         f", got {tuple(x_sf.shape)}")
    checks.same_device("x[1] (sf)", x_sf, "x[0] (data)", data)
    checks.cuda("x[0] (data)", data)
    st, sk = _sf_strides(x_sf, kind == "ue8m0")
    return _Source(data, t, h, _QUANT_DATA[data.dtype], 8, data.stride(0) // unit, (x_sf, kind, st, sk, gm, gk))


def _sf_storage(t, k_blocks, sf_dtype, col_major, device, packed):
    """(returned sf tensor, strides passed to the kernel in sf elements or bytes)."""
    k = _ceil_div(k_blocks, 4) if packed else k_blocks
    needs_zero = packed and k_blocks % 4  # keep unused packed bytes deterministic (0, like the reference)
    alloc = torch.zeros if needs_zero else torch.empty
    if col_major:
        per_16_bytes = 16 // sf_dtype.itemsize  # TMA wants the token dimension 16-byte aligned
        a = _ceil_div(t, per_16_bytes) * per_16_bytes
        buf = alloc((k, max(a, 1)), dtype=sf_dtype, device=device)
        sf = buf.t()[:t]
    else:
        sf = alloc((t, k), dtype=sf_dtype, device=device)
    return sf


def _sf_strides(sf, packed):
    s0, s1 = sf.stride()
    return (4 * s0, 4 * s1) if packed else (s0, s1)


def _sf_kind(use_e4m3_sf, use_packed_ue8m0):
    return "e4m3" if use_e4m3_sf else ("ue8m0" if use_packed_ue8m0 else "fp32")


_SF_DTYPE = {"fp32": torch.float32, "e4m3": torch.float8_e4m3fn, "ue8m0": torch.int32}


def _alloc_q(t, h, device, fmt):
    if fmt == "e4m3":
        return torch.empty((t, h), dtype=torch.float8_e4m3fn, device=device)
    return torch.empty((t, h // 2), dtype=torch.int8, device=device)


def _check_q(q, src, fmt):
    t, h, vec, x = src.t, src.h, src.vec, src.data
    dtype, width = (torch.float8_e4m3fn, h) if fmt == "e4m3" else (torch.int8, h // 2)
    checks.tensor("out[0]", q, (dtype,), ndim=2)
    checks.same_device("out[0]", q, "x", x)
    unit = vec if fmt == "e4m3" else vec // 2
    if tuple(q.shape) != (t, width) or q.stride(1) != 1 or (t > 1 and q.stride(0) % unit):
        raise ValueError(f"out[0] must be {dtype} of shape {(t, width)}, inner stride 1 and a row stride that is a "
                         f"multiple of {unit}; got shape {tuple(q.shape)}, strides {tuple(q.stride())}")
    checks.aligned("out[0]", q, unit)


def _check_sf_out(sf, src, g, kind, name):
    t, h, x = src.t, src.h, src.data
    k = _ceil_div(h, g)
    if kind == "ue8m0":
        k = _ceil_div(k, 4)
    checks.tensor(name, sf, (_SF_DTYPE[kind],), ndim=2)
    checks.same_device(name, sf, "x", x)
    if tuple(sf.shape) != (t, k) or (k > 1 and sf.stride(1) != 1):
        raise ValueError(f"{name} must be a row-major {_SF_DTYPE[kind]} tensor of shape {(t, k)}; got shape "
                         f"{tuple(sf.shape)}, strides {tuple(sf.stride())}")


def _run(src, q, sf, fmt, g, kind, precomputed, round_sf, write_data, clamp, stochastic=False):
    if src.t == 0:
        return
    unit = src.vec if fmt == "e4m3" else src.vec // 2
    sf_t, sf_k = _sf_strides(sf, kind == "ue8m0")
    x_sf, in_kind, in_t, in_k, gm, gk = src.scales or (None, "none", 0, 0, 1, 1)
    rows = rows_for(src.in_dtype, fmt, precomputed, stochastic)
    values = CONTRACT.key(in_dtype=src.in_dtype, in_sf_kind=in_kind, fmt=fmt, num_per_channels=g, sf_kind=kind,
                          precomputed=precomputed, rows=rows, stochastic=stochastic)
    q_stride = (q.stride(0) // unit) if q is not None else 0
    for t0, t in _token_chunks(src.t, rows, _rows_in_grid_y(values, src.data.device)):
        # a later chunk starts t0 rows further into x, q and sf (plain input only: see _token_chunks)
        row_blocks, col_blocks = _grid(t, src.h, src.vec, rows)
        launch(CONTRACT, values, src.data.device,
               x=src.data.data_ptr() + t0 * src.data.stride(0) * src.data.element_size(),
               out=q.data_ptr() + t0 * q.stride(0) * q.element_size() if q is not None else 0,
               sf=sf.data_ptr() + t0 * sf.stride(0) * sf.element_size(), num_tokens=t, hidden_div64=src.h // 64,
               x_stride_vec=src.stride_vec, out_stride_unit=q_stride, sf_stride_t=sf_t, sf_stride_k=sf_k,
               round_sf=int(round_sf), write_data=int(write_data), clamp_min=clamp,
               x_sf=x_sf.data_ptr() if x_sf is not None else 0, in_sf_stride_t=in_t, in_sf_stride_k=in_k,
               in_block_m=gm, in_block_k=gk, num_row_blocks=row_blocks, num_col_blocks=col_blocks)


MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y


def _rows_in_grid_y(values, device):
    """Whether this variant's grid puts the row blocks in y (kernels/quant/per_token_cast.py: the staged FP8 cast),
    read from its launch spec."""
    spec = kernel(CONTRACT, values, device.index).spec
    return spec["kernels"][0]["grid"][1] == "num_row_blocks"


def _token_chunks(t, rows, rows_in_y):
    """(first token, token count) of each launch: one, unless the row blocks sit in grid y and exceed its limit.
    Only plain-input variants put rows in y, so a chunk only offsets the x, q and sf pointers."""
    if not rows_in_y or _ceil_div(t, rows) <= MAX_GRID_Y:
        return ((0, t),)
    step = MAX_GRID_Y * rows
    return tuple((t0, min(step, t - t0)) for t0 in range(0, t, step))


def roundtrip_values(x, fmt, g, use_e4m3_sf):
    """Compile-time values of the one-pass per_token_cast_and_cast_back kernel for x."""
    name = _PLAIN_NAMES[x.dtype]
    return CONTRACT.key(in_dtype=name, in_sf_kind="none", fmt=fmt, num_per_channels=g,
                        sf_kind=_sf_kind(use_e4m3_sf, False), precomputed=False,
                        rows=rows_for(name, fmt, roundtrip=True), stochastic=False, roundtrip=True)


def run_roundtrip(x, fmt, g, round_sf, use_e4m3_sf):
    """Quantize x [T, H] per token and write the dequantized values back into x (validated by the caller)."""
    t, h = x.shape
    vec = 8 if x.dtype == torch.bfloat16 else 4
    stride_vec = x.stride(0) // vec if t > 1 else h // vec
    ptr = x.data_ptr()
    row_blocks, col_blocks = _grid(t, h, vec, rows_for(_PLAIN_NAMES[x.dtype], fmt, roundtrip=True))
    launch(CONTRACT, roundtrip_values(x, fmt, g, use_e4m3_sf), x.device,
           x=ptr, out=ptr, sf=0, num_tokens=t, hidden_div64=h // 64, x_stride_vec=stride_vec,
           out_stride_unit=stride_vec, sf_stride_t=0, sf_stride_k=0, round_sf=int(round_sf), write_data=1,
           clamp_min=config.get_amax_clamp_for_quant(fmt, use_e4m3_sf), x_sf=0, in_sf_stride_t=0,
           in_sf_stride_k=0, in_block_m=1, in_block_k=1, num_row_blocks=row_blocks, num_col_blocks=col_blocks)


def _grid(t, h, vec, rows):
    """(row blocks, column blocks) of kernels/quant/per_token_cast.py: `rows` tokens and 4 warps of 32 lanes x
    `vec` channels per CTA (the kernel takes its grid as arguments; its docstring says why)."""
    return _ceil_div(t, rows), _ceil_div(h, 4 * 32 * vec)


# Launch plans of the common call (fresh outputs): everything that depends only on
# (dtype, hidden, strides, device, options) is validated and resolved once, so a
# repeated call costs two allocations, a few attribute reads and the launch.
_plans = {}
_MAX_PLANS = 4096


# The per-call arguments of a plan's launch, in the order a call passes them: x, out, sf, num_tokens, clamp_min (a
# runtime config value) and num_row_blocks; with column-major or zero-padded packed scales also sf_stride_t and
# sf_stride_k (their padded token dimension grows with T). Everything else is packed once (bound_launcher_named).
_PLAN_VALUES = ("x", "out", "sf", "num_tokens", "clamp_min", "num_row_blocks")
_PLAN_VALUES_SF_STRIDES = ("x", "out", "sf", "num_tokens", "sf_stride_t", "sf_stride_k", "clamp_min", "num_row_blocks")


def _make_plan(x, fmt, g, col, round_sf, packed, e4m3sf):
    vec = 8 if x.dtype == torch.bfloat16 else 4
    kind = _sf_kind(e4m3sf, packed)
    h = x.shape[1]
    rows = rows_for(_PLAIN_NAMES[x.dtype], fmt)
    values = CONTRACT.variant(in_dtype=_PLAIN_NAMES[x.dtype], in_sf_kind="none", fmt=fmt, num_per_channels=g,
                              sf_kind=kind, precomputed=False, rows=rows)
    device, index = x.device, x.device.index
    q_width, q_dtype = (h, torch.float8_e4m3fn) if fmt == "e4m3" else (h // 2, torch.int8)
    k_blocks = _ceil_div(h, g)
    sf_cols = _ceil_div(k_blocks, 4) if packed else k_blocks
    sf_dtype = _SF_DTYPE[kind]
    x_stride_vec, out_stride_unit = x.stride(0) // vec, q_width // (vec if fmt == "e4m3" else vec // 2)
    clamp_key, state = (fmt, e4m3sf), config._state
    row_major_sf = not col and not (packed and k_blocks % 4)
    sf_t, sf_k = (4 * sf_cols, 4) if packed else (sf_cols, 1)  # == _sf_strides of a fresh row-major [t, sf_cols]
    varying = _PLAN_VALUES if row_major_sf else _PLAN_VALUES_SF_STRIDES
    fixed = dict(hidden_div64=h // 64, x_stride_vec=x_stride_vec, out_stride_unit=out_stride_unit, sf_stride_t=sf_t,
                 sf_stride_k=sf_k, round_sf=int(round_sf), write_data=1, x_sf=0, in_sf_stride_t=0, in_sf_stride_k=0,
                 in_block_m=1, in_block_k=1, num_col_blocks=_grid(1, h, vec, 1)[1])
    go = kernel(CONTRACT, values, index).bound_launcher_named(
        index, {n: v for n, v in fixed.items() if n not in varying}, varying)
    max_tokens = MAX_GRID_Y * rows if _rows_in_grid_y(values, device) else 1 << 62
    last_row = rows - 1
    q_out, empty_like = RowOutputs(q_width, q_dtype, device), torch.empty_like
    sf_out = RowOutputs(sf_cols, sf_dtype, device) if row_major_sf else None

    def run(x, t):
        ptr = x.data_ptr()
        if ptr & 15 or t == 0 or t > max_tokens:
            return None  # the general path reports misalignment, handles empty inputs and launches in chunks
        q = empty_like(q_out[t])
        if row_major_sf:
            sf = empty_like(sf_out[t])
            go(raw_stream(index), (ptr, q.data_ptr(), sf.data_ptr(), t, state["clamp"][clamp_key],
                                    (t + last_row) // rows), state["pdl"])
        else:
            sf = _sf_storage(t, k_blocks, sf_dtype, col, device, packed)
            go(raw_stream(index), (ptr, q.data_ptr(), sf.data_ptr(), t, *_sf_strides(sf, packed),
                                    state["clamp"][clamp_key], (t + last_row) // rows), state["pdl"])
        return q, sf

    return run


def per_token_cast(x, fmt, num_per_channels, x_block_size=None, use_tma_aligned_col_major_sf=False,
                   round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, stochastic_cast=False, out=None):
    """Quantize each row in blocks of ``num_per_channels`` channels; returns (data, sf). (v1's fmt='e5m6' is
    dispatched by the public kernelkiln.quant.per_token_cast to kernelkiln.quant._e5m6, which imports this module.)"""
    if out is None and x_block_size is None and stochastic_cast is False and type(x) is torch.Tensor and \
            (round_sf is True or round_sf is False) and (use_packed_ue8m0 is True or use_packed_ue8m0 is False) and \
            (use_e4m3_sf is True or use_e4m3_sf is False) and \
            (use_tma_aligned_col_major_sf is True or use_tma_aligned_col_major_sf is False):
        shape = x.shape
        key = (x.dtype, shape[1:], x.stride(), x.get_device(), fmt, num_per_channels, use_tma_aligned_col_major_sf,
               round_sf, use_packed_ue8m0, use_e4m3_sf)
        plan = _plans.get(key)
        if plan is None:
            result = _per_token_cast_checked(x, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf,
                                             use_packed_ue8m0, use_e4m3_sf, None)
            if len(_plans) >= _MAX_PLANS:
                _plans.clear()
            if x.shape[0] > 0 and x.stride(0) % (16 // x.element_size()) == 0 and not checks.on_npu(x):
                # validated for every token count with these strides: later calls take the plan (CUDA only: an NPU
                # call takes the checked path each time)
                _plans[key] = _make_plan(x, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf,
                                         use_packed_ue8m0, use_e4m3_sf)
            return result
        result = plan(x, shape[0])
        if result is not None:
            return result
    checks.flag("stochastic_cast", stochastic_cast)
    if stochastic_cast and (fmt != "e4m3" or isinstance(x, (tuple, list))):
        raise ValueError(f"stochastic_cast=True rounds plain bf16/fp32 input to fmt='e4m3' only; "
                         f"got fmt={fmt!r}{' and pre-quantized input' if isinstance(x, (tuple, list)) else ''}")
    return _per_token_cast_checked(x, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf,
                                   use_packed_ue8m0, use_e4m3_sf, out, x_block_size, stochastic_cast)


def _per_token_cast_checked(x, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0,
                            use_e4m3_sf, out, x_block_size=None, stochastic=False):
    """The fully validated path (first call of a plan, ``out=``, pre-quantized or odd inputs)."""
    src = _check_x(x, x_block_size)
    _check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf, use_tma_aligned_col_major_sf)
    kind = _sf_kind(use_e4m3_sf, use_packed_ue8m0)
    t, h = src.t, src.h
    if checks.on_npu(src.data):  # the tensors' device chooses the backend
        from kernelkiln.quant import _per_token_ascend
        return _per_token_ascend.per_token_cast(src, fmt, num_per_channels, use_tma_aligned_col_major_sf, round_sf,
                                                use_packed_ue8m0, use_e4m3_sf, out, stochastic)
    checks.cuda("x", src.data)
    if out is not None:
        q, sf = checks.out_pair(out, use_tma_aligned_col_major_sf)
        _check_q(q, src, fmt)
        _check_sf_out(sf, src, num_per_channels, kind, "out[1]")
    else:
        q = _alloc_q(t, h, src.data.device, fmt)
        sf = _sf_storage(t, _ceil_div(h, num_per_channels), _SF_DTYPE[kind], use_tma_aligned_col_major_sf,
                         src.data.device, kind == "ue8m0")
    clamp = config.get_amax_clamp_for_quant(fmt, use_e4m3_sf)
    _run(src, q, sf, fmt, num_per_channels, kind, False, round_sf, True, clamp, stochastic)
    return q, sf


def per_token_cast_with_sf_only(x, fmt, num_per_channels, use_tma_aligned_col_major_sf=False, round_sf=False,
                                use_packed_ue8m0=False, use_e4m3_sf=False, out_sf=None):
    """Only the scales of per_token_cast (same values and layouts)."""
    src = _check_x(x)
    _check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf, use_tma_aligned_col_major_sf)
    kind = _sf_kind(use_e4m3_sf, use_packed_ue8m0)
    checks.cuda("x", x)
    if out_sf is not None:
        if use_tma_aligned_col_major_sf:
            raise ValueError("out_sf takes row-major scales only; use_tma_aligned_col_major_sf must be False")
        _check_sf_out(out_sf, src, num_per_channels, kind, "out_sf")
        sf = out_sf
    else:
        sf = _sf_storage(src.t, _ceil_div(src.h, num_per_channels), _SF_DTYPE[kind], use_tma_aligned_col_major_sf,
                         x.device, kind == "ue8m0")
    _run(src, None, sf, fmt, num_per_channels, kind, False, round_sf, False,
         config.get_amax_clamp_for_quant(fmt, use_e4m3_sf))
    return sf


def per_token_cast_with_precomputed_sf(x, fmt, num_per_channels, sf, use_tma_aligned_col_major_sf=False,
                                       round_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False, out=None):
    """Quantize with caller-supplied row-major fp32/e4m3 scales (multiplier 1/sf); returns the data."""
    src = _check_x(x)
    _check_options(fmt, num_per_channels, round_sf, use_packed_ue8m0, use_e4m3_sf, use_tma_aligned_col_major_sf)
    if use_packed_ue8m0 or use_tma_aligned_col_major_sf:
        raise ValueError("precomputed sf must be row-major fp32 or e4m3: use_packed_ue8m0 and "
                         "use_tma_aligned_col_major_sf must be False")
    kind = "e4m3" if use_e4m3_sf else "fp32"
    _check_sf_out(sf, src, num_per_channels, kind, "sf")
    checks.cuda("x", x)
    if out is not None:
        _check_q(out, src, fmt)
        q = out
    else:
        q = _alloc_q(src.t, src.h, x.device, fmt)
    _run(src, q, sf, fmt, num_per_channels, kind, True, False, True, 0.0)
    return q
