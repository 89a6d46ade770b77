"""E5M6 (v1-only): per_token_cast_to_e5m6 and cast_back_e5m6 (docs/SPEC.md §2.2, §3.2).

Reached publicly as ``per_token_cast(x, 'e5m6', H)`` and ``cast_back(x, fmt, (1, H),
x_special_fmt='e5m6')`` (the dispatchers forward here), and as module-level functions.
Data: packed uint8 ``[T, 3H/2]`` (three little-endian words per 8 values); scales: one per
token, fp32 ``[T, 1]`` or packed UE8M0 int32 ``[T, 1]``, optionally TMA-aligned column-major.
The amax floor is ``E5M6_CLAMP_MIN`` (kernelkiln._formats says why).
"""
import torch

from kernelkiln._formats import E5M6_CLAMP_MIN
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.quant import _per_token
from kernelkiln_contract.quant import E5M6 as CONTRACT
from kernelkiln_contract.quant import E5M6_SF_FP32 as SF_FP32
from kernelkiln_contract.quant import E5M6_SF_UE8M0 as SF_UE8M0

OP = CONTRACT.op
_DTYPES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_OUT = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _check_int(name, v):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int, got {v!r}")


def _sf_args(sf):
    """(fp32 pointer, byte pointer, token stride, mode): fp32 [T, 1] or packed UE8M0 int32 [T, 1]."""
    if sf.dtype == torch.int32:  # byte 0 of each little-endian word is the row's UE8M0
        return 0, sf.data_ptr(), 4 * sf.stride(0), SF_UE8M0
    return sf.data_ptr(), 0, sf.stride(0), SF_FP32


def per_token_cast_to_e5m6(x, num_per_channels, use_tma_aligned_col_major_sf=False, round_sf=False,
                           use_packed_ue8m0=False):
    """Per-token E5M6 quantization of x [T, H] (bf16/fp32, H % 8 == 0, num_per_channels == H).

    Returns ``(packed uint8 [T, 3H/2], sf [T, 1])`` like tile_kernels v1.
    """
    checks.tensor("x", x, tuple(_DTYPES), ndim=2)
    t, h = x.shape
    _check_int("num_per_channels", num_per_channels)
    checks.scale_flags(round_sf, use_packed_ue8m0, use_tma_aligned_col_major_sf=use_tma_aligned_col_major_sf)
    if h % 8 or h == 0:
        raise ValueError(f"x.shape[1] (hidden) must be a positive multiple of 8 for E5M6 (8 values per 12 bytes), "
                         f"got {h}")
    if num_per_channels != h:
        raise ValueError(f"E5M6 uses one scale per token: num_per_channels must equal the hidden size {h}, "
                         f"got {num_per_channels}")
    if x.stride(1) != 1 or (t > 1 and x.stride(0) % 8):
        raise ValueError(f"x must have inner stride 1 and a row stride that is a multiple of 8 elements; "
                         f"got strides {tuple(x.stride())}")
    checks.aligned("x", x, 16)
    checks.cuda("x", x)
    kind = "ue8m0" if use_packed_ue8m0 else "fp32"
    q = torch.empty((t, h * 3 // 2), dtype=torch.uint8, device=x.device)
    sf = _per_token._sf_storage(t, 1, _per_token._SF_DTYPE[kind], use_tma_aligned_col_major_sf, x.device,
                                kind == "ue8m0")
    if t:
        f32_ptr, byte_ptr, sf_stride, mode = _sf_args(sf)
        launch(CONTRACT, CONTRACT.key(direction="encode", dtype=_DTYPES[x.dtype]), x.device,
               x=x.data_ptr(), out=q.data_ptr(), sf=f32_ptr, sf_bytes=byte_ptr, num_tokens=t, groups=h // 8,
               x_stride8=x.stride(0) // 8, out_stride=q.stride(0) // 4, sf_stride=sf_stride, sf_mode=mode,
               round_sf=int(round_sf), clamp_min=E5M6_CLAMP_MIN)
    return q, sf


def cast_back_e5m6(x, fmt, x_block_size):
    """Decode E5M6 ``(packed uint8 [T, 3H/2], sf [T, 1] fp32 / packed UE8M0 int32)`` to bf16/fp32 [T, H]."""
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError("x must be a (data, sf) pair of tensors")
    checks.choice("fmt", fmt, tuple(_OUT))
    data, sf = x
    checks.tensor("x[0] (data)", data, (torch.uint8,), ndim=2)
    checks.tensor("x[1] (sf)", sf, (torch.float32, torch.int32), ndim=2)
    t, nb = data.shape
    if nb % 12 or nb == 0:
        raise ValueError(f"x[0] (packed E5M6) must be [T, 3H/2] with H % 8 == 0, i.e. a width that is a positive "
                         f"multiple of 12 bytes; got {nb}")
    h = nb * 2 // 3
    if not (isinstance(x_block_size, (tuple, list)) and len(x_block_size) == 2):
        raise TypeError(f"x_block_size must be a (1, H) pair, got {x_block_size!r}")
    if tuple(x_block_size) != (1, h):
        raise ValueError(f"E5M6 uses one scale per token: x_block_size must be (1, {h}), got {tuple(x_block_size)}")
    if tuple(sf.shape) != (t, 1):
        raise ValueError(f"x[1] (sf) must have shape {(t, 1)} (one scale per token), got {tuple(sf.shape)}")
    if data.stride(1) != 1 or (t > 1 and data.stride(0) % 4):
        raise ValueError(f"x[0] must have inner stride 1 and a row stride that is a multiple of 4 bytes; "
                         f"got strides {tuple(data.stride())}")
    checks.aligned("x[0] (data)", data, 4)
    checks.same_device("x[1] (sf)", sf, "x[0] (data)", data)
    checks.cuda("x[0] (data)", data)
    out = torch.empty((t, h), dtype=_OUT[fmt], device=data.device)
    if t:
        f32_ptr, byte_ptr, sf_stride, mode = _sf_args(sf)
        launch(CONTRACT, CONTRACT.key(direction="decode", dtype=_DTYPES[out.dtype]), data.device,
               x=data.data_ptr(), out=out.data_ptr(), sf=f32_ptr, sf_bytes=byte_ptr, num_tokens=t, groups=h // 8,
               x_stride=data.stride(0) // 4, out_stride8=h // 8, sf_stride=sf_stride, sf_mode=mode)
    return out


def per_token_cast_dispatch(x, num_per_channels, x_block_size, use_tma_aligned_col_major_sf, round_sf,
                            use_packed_ue8m0, use_e4m3_sf, stochastic_cast, out):
    """``per_token_cast(x, 'e5m6', ...)``: the options E5M6 has no meaning for must keep their defaults."""
    for name, value in (("x_block_size", x_block_size), ("out", out)):
        if value is not None:
            raise ValueError(f"fmt='e5m6' takes plain bf16/fp32 input and returns new tensors: {name} must be None")
    for name, value in (("use_e4m3_sf", use_e4m3_sf), ("stochastic_cast", stochastic_cast)):
        if value is not False:
            raise ValueError(f"fmt='e5m6' has fp32 or UE8M0 scales and round-to-nearest only: {name} must be False")
    return per_token_cast_to_e5m6(x, num_per_channels, use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
