"""per_block_cast and its sf-only / precomputed-sf variants (tile_kernels 2.1 signatures).

2-D block quantization: one scale per (gm, g) block of x [T, H], gm, g in {32, 128}.
Output layouts follow docs/SPEC.md §2.1 (as per_token_cast): e4m3 data [T, H] or
packed e2m1 int8 [T, H/2]; fp32 scales [ceil(T/gm), ceil(H/g)] or UE8M0 packed
four per int32 along K, optionally TMA-aligned column-major.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln._ops.launch import launch
from kernelkiln.quant._per_token import _alloc_q, _ceil_div, _sf_storage, _sf_strides
from kernelkiln_contract.quant import PER_BLOCK_CAST as CONTRACT

OP = CONTRACT.op
FORMATS = ("e4m3", "e2m1")
BLOCK_SIDES = (32, 128)
_IN_DTYPES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_SF_FP32, _SF_UE8M0 = 0, 1  # kernels/quant/per_block_cast.py SF_FP32 / SF_UE8M0


def _check_block(block_size):
    if not (isinstance(block_size, (tuple, list)) and len(block_size) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) for v in block_size)):
        raise TypeError(f"block_size must be a (gm, g) pair of ints, got {block_size!r}")
    gm, g = block_size
    if gm not in BLOCK_SIDES or g not in BLOCK_SIDES:
        raise ValueError(f"block_size must be (gm, g) with gm and g in {list(BLOCK_SIDES)}, got {tuple(block_size)}")
    return gm, g


def _check_options(fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0):
    checks.choice("fmt", fmt, FORMATS)
    block = _check_block(block_size)
    checks.scale_flags(round_sf, use_packed_ue8m0, use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf)
    return block


def _check_x(x):
    checks.tensor("x", x, tuple(_IN_DTYPES), ndim=2)
    t, h = x.shape
    if h % 64 or h == 0:
        raise ValueError(f"x.shape[1] (hidden) must be a positive multiple of 64, got {h}")
    vec = 8 if x.dtype == torch.bfloat16 else 4
    if x.stride(1) != 1 or (t > 1 and x.stride(0) % vec):
        raise ValueError(f"x must have inner stride 1 and a row stride that is a multiple of {vec} elements "
                         f"(16 bytes); got strides {tuple(x.stride())}")
    checks.aligned("x", x, 16)
    return vec


def _sf_logical(x, block):
    return _ceil_div(x.shape[0], block[0]), _ceil_div(x.shape[1], block[1])


def _check_q(q, x, fmt):
    t, h = x.shape
    dtype, width = (torch.float8_e4m3fn, h) if fmt == "e4m3" else (torch.int8, h // 2)
    checks.tensor("out[0]", q, (dtype,), ndim=2)
    checks.same_device("out[0]", q, "x", x)
    unit = 16 if fmt == "e4m3" else 8  # bytes of one row segment a thread stores (bf16 input; fp32 needs less)
    if tuple(q.shape) != (t, width) or q.stride(1) != 1 or (t > 1 and q.stride(0) % unit):
        raise ValueError(f"out[0] must be {dtype} of shape {(t, width)}, inner stride 1 and a row stride that is a "
                         f"multiple of {unit}; got shape {tuple(q.shape)}, strides {tuple(q.stride())}")
    checks.aligned("out[0]", q, 16)


def _check_sf_out(sf, x, block, packed, name):
    mb, kb = _sf_logical(x, block)
    dtype, shape = (torch.int32, (mb, _ceil_div(kb, 4))) if packed else (torch.float32, (mb, kb))
    checks.tensor(name, sf, (dtype,), ndim=2)
    checks.same_device(name, sf, "x", x)
    if tuple(sf.shape) != shape or (shape[1] > 1 and sf.stride(1) != 1):
        raise ValueError(f"{name} must be a row-major {dtype} tensor of shape {shape}; got shape "
                         f"{tuple(sf.shape)}, strides {tuple(sf.stride())}")


def _alloc_sf(x, block, col_major, packed):
    mb, kb = _sf_logical(x, block)
    return _sf_storage(mb, kb, torch.int32 if packed else torch.float32, col_major, x.device, packed)


def _run(x, vec, q, sf, fmt, block, packed, round_sf, precomputed, write_data):
    checks.cuda("x", x)  # after every shape/option check, so those are testable without a GPU
    t, h = x.shape
    if t == 0:
        return
    gm, g = block
    unit = vec if fmt == "e4m3" else vec // 2
    sf_t, sf_k = _sf_strides(sf, packed)
    values = CONTRACT.key(in_dtype=_IN_DTYPES[x.dtype], fmt=fmt)
    ptr_sf, ptr_bytes = (0, sf.data_ptr()) if packed else (sf.data_ptr(), 0)
    clamp = 0.0 if precomputed else config.get_amax_clamp_for_quant(fmt, False)
    launch(CONTRACT, values, x.device, x=x.data_ptr(), out=q.data_ptr() if q is not None else 0, sf=ptr_sf,
           sf_bytes=ptr_bytes, num_tokens=t, hidden_div64=h // 64, x_stride_vec=x.stride(0) // vec,
           out_stride_unit=(q.stride(0) // unit) if q is not None else 0, block_m=gm, block_k_lanes=g // vec,
           sf_mode=_SF_UE8M0 if packed else _SF_FP32, sf_stride_t=sf_t, sf_stride_k=sf_k, round_sf=int(round_sf),
           precomputed=int(precomputed), write_data=int(write_data), clamp_min=clamp)


def per_block_cast(x, fmt, block_size, use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False,
                   out=None):
    """2-D block quantization to e4m3 / e2m1: one fp32 or packed-UE8M0 scale per (gm, g) block.

    Same signature, semantics and outputs as tile_kernels 2.1 ``quant.per_block_cast``
    (returns (data, sf)). Under ``torch.compile`` the call goes through the registered
    op ``kernelkiln::per_block_cast``.
    """
    if out is None and torch.compiler.is_compiling():
        return torch.ops.kernelkiln.per_block_cast(x, fmt, list(block_size), use_tma_aligned_col_major_sf, round_sf,
                                                 use_packed_ue8m0)
    return _per_block_cast(x, fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0, out)


def _per_block_cast(x, fmt, block_size, use_tma_aligned_col_major_sf=False, round_sf=False, use_packed_ue8m0=False,
                    out=None):
    vec = _check_x(x)
    block = _check_options(fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    if out is not None:
        q, sf = checks.out_pair(out, use_tma_aligned_col_major_sf)
        _check_q(q, x, fmt)
        _check_sf_out(sf, x, block, use_packed_ue8m0, "out[1]")
    else:
        q = _alloc_q(x.shape[0], x.shape[1], x.device, fmt)
        sf = _alloc_sf(x, block, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    _run(x, vec, q, sf, fmt, block, use_packed_ue8m0, round_sf, False, True)
    return q, sf


def per_block_cast_with_sf_only(x, fmt, block_size, use_tma_aligned_col_major_sf=False, round_sf=False,
                                use_packed_ue8m0=False, out_sf=None):
    """Only the scales of per_block_cast (same values and layouts)."""
    vec = _check_x(x)
    block = _check_options(fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    if out_sf is not None:
        if use_tma_aligned_col_major_sf:
            raise ValueError("out_sf takes row-major scales only; use_tma_aligned_col_major_sf must be False")
        _check_sf_out(out_sf, x, block, use_packed_ue8m0, "out_sf")
        sf = out_sf
    else:
        sf = _alloc_sf(x, block, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    _run(x, vec, None, sf, fmt, block, use_packed_ue8m0, round_sf, False, False)
    return sf


def per_block_cast_with_precomputed_sf(x, fmt, block_size, sf, use_tma_aligned_col_major_sf=False, round_sf=False,
                                       use_packed_ue8m0=False, out=None):
    """Quantize with caller-supplied row-major fp32 block scales (multiplier 1/sf); returns the data."""
    vec = _check_x(x)
    block = _check_options(fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    if use_packed_ue8m0 or use_tma_aligned_col_major_sf:
        raise ValueError("precomputed sf must be row-major fp32: use_packed_ue8m0 and "
                         "use_tma_aligned_col_major_sf must be False")
    _check_sf_out(sf, x, block, False, "sf")
    if out is not None:
        _check_q(out, x, fmt)
        q = out
    else:
        q = _alloc_q(x.shape[0], x.shape[1], x.device, fmt)
    _run(x, vec, q, sf, fmt, block, False, False, True, True)
    return q


# ---- torch.library ops (declared here, registered on the first lookup of one in torch.ops.kernelkiln) ----

@library_op("per_block_cast", mutates_args=())
def _per_block_cast_op(x: torch.Tensor, fmt: str, block_size: list[int], use_tma_aligned_col_major_sf: bool,
                       round_sf: bool, use_packed_ue8m0: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _per_block_cast(x, fmt, tuple(block_size), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)


@_per_block_cast_op.register_fake
def _per_block_cast_op_fake(x, fmt, block_size, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0):
    # The real allocators, run under fake mode, give the exact shapes and strides (col-major sf too).
    block = _check_options(fmt, tuple(block_size), use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
    return _alloc_q(x.shape[0], x.shape[1], x.device, fmt), _alloc_sf(x, block, use_tma_aligned_col_major_sf,
                                                                      use_packed_ue8m0)
