"""Bit-exact PyTorch references for the remaining quantizers: E5M6 (v1) encode/decode.

docs/SPEC.md §2.2 defines E5M6: a 12-bit float (1 sign, 5 exponent bits with bias 15,
6 mantissa bits), i.e. fp16 without its 4 low mantissa bits. The encoder is spelled out
bit by bit there and reproduced literally here (the kernels do the same operations):

  h16 = fp16_bits(round_toward_zero_fp16(v));  h = h16 >> 4;
  h += 1  if  (h & 1) + (fp32_bits(v) & 0x1FFFF) > 0x10000

In the fp16 normal range that is round-to-nearest-even on the 17 discarded fp32 mantissa
bits. Below 2**-14 the rule is applied as written (it is the definition, not RNE there).
Eight codes h0..h7 pack into three little-endian uint32 words (12 bytes):
  w0 = h0<<20 | h1<<8 | h2>>4,  w1 = h2<<28 | h3<<16 | h4<<4 | h5>>8,  w2 = h5<<24 | h6<<12 | h7.

Scaling is one scale per token over the whole row (num_per_channels == H), with the §2.1
rules and fmt_max = 65024 (the E5M6 max normal). Plain torch only; runs on any device.
"""
import torch

from kernelkiln._formats import E5M6_CLAMP_MIN, E5M6_MAX  # noqa: F401  (shared with the ops)

from .quant import (
    _BACK_FMTS,
    _canonicalize_nan,
    _check_scale_flags,
    _ceil_log2_exponent,
    _const,
    _exp2_exact,
    _exp2_inverse,
    _pack_ue8m0,
    _to_tma_col_major,
    _ue8m0_bytes,
    _ue8m0_decode,
)

__all__ = ["cast_back_from_e5m6", "cast_to_e5m6"]  # this module's references (kernelkiln.torch re-exports them)

_MASK32 = 0xFFFFFFFF


def _fp16_bits_rtz(v):
    """fp16 bits (as int32 0..0xFFFF) of fp32 ``v`` rounded toward zero, like cvt.rz.f16.f32.

    torch converts with RNE; RNE lands within one fp16 ulp of v, so where it rounded away
    from zero (|fp16| > |v|) the next smaller magnitude is the RTZ result. That also turns
    an RNE overflow to inf into 65504 for finite v, as RTZ does.
    """
    h = v.to(torch.float16)
    bits = h.view(torch.int16).to(torch.int32) & 0xFFFF
    away = h.float().abs() > v.abs()
    return torch.where(away, bits - 1, bits)


def e5m6_encode(v):
    """12-bit E5M6 codes (int32, sign in bit 11) of fp32 ``v`` by the §2.2 rule."""
    if not isinstance(v, torch.Tensor) or v.dtype != torch.float32:
        raise TypeError('v must be a torch.float32 tensor')
    h = _fp16_bits_rtz(v) >> 4
    low = v.view(torch.int32) & 0x1FFFF
    return h + (((h & 1) + low) > 0x10000).to(torch.int32)


def e5m6_decode(h):
    """fp32 values of 12-bit E5M6 codes (exact: the code shifted left by 4 is an fp16)."""
    bits16 = (h.to(torch.int32) & 0xFFF) << 4
    return _int32_to_int16(bits16).view(torch.float16).float()


def _int32_to_int16(b):
    # 0..0xFFFF -> the int16 with those bits (int32 -> int16 conversion of >= 2**15 is not portable).
    return torch.where(b >= 0x8000, b - 0x10000, b).to(torch.int16)


def pack_e5m6(h):
    """Pack codes ``[T, H]`` (H % 8 == 0) into uint8 ``[T, 3H/2]``: three little-endian words per 8 values."""
    t, n = h.shape
    if n % 8:
        raise ValueError(f'pack_e5m6 needs the last dim to be a multiple of 8, got {n}')
    g = h.to(torch.int64).reshape(t, n // 8, 8)
    h0, h1, h2, h3, h4, h5, h6, h7 = g.unbind(-1)
    w0 = (h0 << 20) | (h1 << 8) | (h2 >> 4)
    w1 = ((h2 << 28) | (h3 << 16) | (h4 << 4) | (h5 >> 8)) & _MASK32
    w2 = ((h5 << 24) | (h6 << 12) | h7) & _MASK32
    words = torch.stack((w0, w1, w2), dim=-1)  # [T, H/8, 3]
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int64, device=h.device)
    bytes_ = (words.unsqueeze(-1) >> shifts) & 0xFF  # little-endian bytes of each word
    return bytes_.to(torch.uint8).reshape(t, n * 3 // 2)


def unpack_e5m6(packed):
    """Inverse of ``pack_e5m6``: uint8 ``[T, 3H/2]`` -> int32 codes ``[T, H]``."""
    t, nb = packed.shape
    if nb % 12:
        raise ValueError(f'packed E5M6 rows hold 12 bytes per 8 values; got a width of {nb} bytes')
    b = packed.to(torch.int64).reshape(t, nb // 12, 3, 4)
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int64, device=packed.device)
    w0, w1, w2 = (b << shifts).sum(-1).unbind(-1)
    hs = [w0 >> 20, (w0 >> 8) & 0xFFF, ((w0 & 0xFF) << 4) | (w1 >> 28), (w1 >> 16) & 0xFFF, (w1 >> 4) & 0xFFF,
          ((w1 & 0xF) << 8) | (w2 >> 24), (w2 >> 12) & 0xFFF, w2 & 0xFFF]
    return torch.stack(hs, dim=-1).reshape(t, nb // 12 * 8).to(torch.int32)


def cast_to_e5m6(x, num_per_channels=None, use_tma_aligned_col_major_sf=False, round_sf=False,
                 use_packed_ue8m0=False, clamp_min_value=None):
    """Per-token E5M6 quantization: ``(packed uint8 [T, 3H/2], sf [T, 1])``; v1's positional order.

    x: bf16/fp32 ``[T, H]``, H % 8 == 0; num_per_channels must be None or H (one scale per row).
    sf = amax/65024 (fp32), or 2**ceil(log2(amax * (1/65024))) with round_sf, packed as UE8M0
    int32 with use_packed_ue8m0; the data multiplier is 65024/amax, or the exact 2**-e.
    """
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.bfloat16, torch.float32) or x.dim() != 2:
        raise TypeError('x must be a 2-D torch.bfloat16 / torch.float32 tensor')
    t, h = x.shape
    if h % 8 or h == 0:
        raise ValueError(f'E5M6 packs 8 values into 12 bytes: H must be a positive multiple of 8, got {h}')
    if num_per_channels is not None and num_per_channels != h:
        raise ValueError(f'E5M6 scales whole rows: num_per_channels must equal H={h}, got {num_per_channels}')
    _check_scale_flags(round_sf, use_packed_ue8m0, False)
    clamp = E5M6_CLAMP_MIN if clamp_min_value is None else float(clamp_min_value)
    v = x.float()
    a = v.abs()
    amax = a.masked_fill(torch.isnan(a), 0.0).amax(dim=1, keepdim=True) if h else v.new_zeros((t, 1))
    amax = torch.maximum(amax, _const(amax, clamp))
    if round_sf:
        e = _ceil_log2_exponent(amax * _const(amax, 1.0 / E5M6_MAX))
        sf, sf_inv = _exp2_exact(e), _exp2_inverse(e)
    else:
        fmt_max = _const(amax, E5M6_MAX)
        sf, sf_inv = amax / fmt_max, fmt_max / amax
    q = pack_e5m6(e5m6_encode(v * sf_inv))
    if use_packed_ue8m0:
        sf = _pack_ue8m0(_ue8m0_bytes(sf), 1)
    if use_tma_aligned_col_major_sf:
        sf = _to_tma_col_major(sf)
    return q, sf


def cast_back_from_e5m6(x, fmt, x_block_size=None):
    """Decode ``(packed uint8 [T, 3H/2], sf [T, 1] fp32 or packed-UE8M0 int32)`` to ``fmt`` ('bf16'/'fp32').

    out = decode(code) * sf in fp32, rounded once to the output dtype.
    """
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError('x must be a (data, sf) pair of tensors')
    if fmt not in _BACK_FMTS:
        raise ValueError(f"fmt must be one of {tuple(_BACK_FMTS)}, got {fmt!r}")
    data, sf = x
    if data.dtype != torch.uint8 or data.dim() != 2:
        raise TypeError('x[0] must be a 2-D torch.uint8 tensor of packed E5M6')
    values = e5m6_decode(unpack_e5m6(data))
    t, h = values.shape
    if x_block_size is not None and tuple(x_block_size) != (1, h):
        raise ValueError(f'E5M6 scales whole rows: x_block_size must be (1, {h}), got {tuple(x_block_size)}')
    if tuple(sf.shape) != (t, 1):
        raise ValueError(f'x[1] (sf) must have shape {(t, 1)}, got {tuple(sf.shape)}')
    if sf.dtype == torch.int32:
        s = _ue8m0_decode(sf & 0xFF)  # byte 0 of the little-endian word holds the row's UE8M0
    elif sf.dtype == torch.float32:
        s = sf
    else:
        raise TypeError(f'x[1] (sf) must be torch.float32 or packed UE8M0 torch.int32, got {sf.dtype}')
    return _canonicalize_nan((values * s).to(_BACK_FMTS[fmt]))
