"""Bit-exact PyTorch reference of KernelKiln's element-wise cast and its stochastic rounding.

The rounding rules, the hash and the bit layout are documented in
``kernels/common/stochastic.py`` (docs/SPEC.md §2.2); this module mirrors them
with int64 tensors holding uint32 values, so it runs on any device.

``cast_dtype`` is the oracle of ``kernelkiln.quant.cast``. It is not called
``cast`` because ``kernelkiln.torch.cast`` is already the block-quantizer oracle
(tile_kernels' ``torch.cast(x, fmt, block_size, ...)``, docs/SPEC.md §3.9).
"""
import torch

__all__ = ["cast_dtype", "stochastic_round"]  # this module's references (kernelkiln.torch re-exports them)

_M32 = 0xFFFFFFFF
HASH_MULTIPLIERS = (0x5671D42B, 0x9995E499, 0xACE1B8A5, 0xE153538D)
FINAL_MULTIPLIER = 0x7FEB352D
R0_MULTIPLIER = 0x846CA68B
R1_MULTIPLIER = 0xD35A2D97

# (input dtype, output dtype) pairs; the stochastic ones are docs/SPEC.md §2.2's list.
STOCHASTIC_PAIRS = ((torch.float32, torch.bfloat16), (torch.float32, torch.float8_e4m3fn),
                    (torch.bfloat16, torch.float8_e4m3fn))
RNE_PAIRS = STOCHASTIC_PAIRS + ((torch.bfloat16, torch.float32), (torch.float8_e4m3fn, torch.bfloat16),
                                (torch.float8_e4m3fn, torch.float32))

_E4M3_MAX_BITS = 0x43E00000  # 448.0
_BF16_MAX, _BF16_NAN, _E4M3_NAN = 0x7F7F, 0x7FFF, 0x7F
_FP32_NAN_BITS = 0x7FFFFFFF


def _mul32(a, c):
    """(a * c) mod 2**32 for int64 tensors a in [0, 2**32) and a constant c, without int64 overflow."""
    lo = a * (c & 0xFFFF)
    hi = ((a * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _M32


def _xorshift(h, s):
    return h ^ (h >> s)


def fp32_bits(x):
    """uint32 bits (as int64) of an fp32 tensor, or of bf16 values widened exactly (bits << 16)."""
    if x.dtype == torch.bfloat16:
        return (x.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF) << 16
    if x.dtype != torch.float32:
        raise TypeError(f'x must be float32 or bfloat16, got {x.dtype}')
    return x.contiguous().view(torch.int32).to(torch.int64) & _M32


def quad_random_bits(bits, quad_offset=0, quad_index=None):
    """(r0, r1), each int64 ``[n/4]`` of uint32 values, for fp32 ``bits [n]`` grouped in quads.

    Quad j has index ``quad_offset + j`` (mod 2**32) in the hash (``quad_index[j]`` when that
    int64 tensor is given: per_token_cast restarts the count on every row).
    """
    if bits.dim() != 1 or bits.numel() % 4:
        raise ValueError(f'bits must be 1-D with a multiple of 4 elements, got shape {tuple(bits.shape)}')
    v = bits.reshape(-1, 4)
    if quad_index is None:
        q = torch.arange(v.shape[0], dtype=torch.int64, device=bits.device) + int(quad_offset)
    else:
        q = quad_index.to(torch.int64) + int(quad_offset)
    h = q & _M32
    for i, m in enumerate(HASH_MULTIPLIERS):
        h = (h + _mul32(v[:, i], m)) & _M32
    h = _mul32(_xorshift(h, 23), FINAL_MULTIPLIER)
    h = _xorshift(h, 16)
    return _xorshift(_mul32(h, R0_MULTIPLIER), 11), _xorshift(_mul32(h, R1_MULTIPLIER), 11)


def bf16_bits_stochastic(bits, r16):
    """bf16 bits (int64 in [0, 0xFFFF]) of fp32 ``bits`` rounded with random ``r16`` (see kernels/common)."""
    a = bits & 0x7FFFFFFF
    mag = torch.clamp((a + r16) >> 16, max=_BF16_MAX)
    out = mag | ((bits >> 16) & 0x8000)
    return torch.where(a > 0x7F800000, torch.full_like(out, _BF16_NAN), out)


def e4m3_byte_stochastic(bits, r16):
    """e4m3 byte (int64 in [0, 0xFF]) of fp32 ``bits`` rounded with random ``r16``."""
    a = bits & 0x7FFFFFFF
    normal = torch.clamp(((a + (r16 << 4)) >> 20) - ((127 - 7) << 3), max=0x7E)
    # Subnormal results: |v| * 2**9 = k + f exactly; round up iff f >= 1 - r16 / 2**16 (exact in fp32).
    y = a.to(torch.int32).view(torch.float32) * torch.full_like(a, 512, dtype=torch.float32)
    k = torch.floor(y)
    threshold = (65536 - r16).to(torch.float32) * torch.full_like(y, 1.0 / 65536)
    sub = k.to(torch.int64) + ((y - k) >= threshold).to(torch.int64)
    mag = torch.where(a < 0x3C800000, sub, normal)
    out = mag | ((bits >> 24) & 0x80)
    return torch.where(a > 0x7F800000, torch.full_like(out, _E4M3_NAN), out)


def _element_random_bits(bits, out_dtype, quad_offset):
    """16 random bits per element in the layout of kernels/common/stochastic.py."""
    r0, r1 = quad_random_bits(bits, quad_offset)
    lo0, hi0 = r0 & 0xFFFF, r0 >> 16
    if out_dtype == torch.bfloat16:
        per = (lo0, hi0, r1 & 0xFFFF, r1 >> 16)
    else:
        per = (lo0, lo0, hi0, hi0)
    return torch.stack(per, dim=1).reshape(-1)


def stochastic_round(x, out_dtype, quad_offset=0):
    """fp32 / bf16 values ``x`` (flattened) rounded stochastically to bf16 or e4m3; returns ``[n]``."""
    bits = fp32_bits(x.reshape(-1))
    r16 = _element_random_bits(bits, out_dtype, quad_offset)
    if out_dtype == torch.bfloat16:
        b = bf16_bits_stochastic(bits, r16)
        return (b - ((b >> 15) << 16)).to(torch.int16).view(torch.bfloat16)  # two's complement, portably
    if out_dtype == torch.float8_e4m3fn:
        return e4m3_byte_stochastic(bits, r16).to(torch.uint8).view(torch.float8_e4m3fn)
    raise TypeError(f'out_dtype must be torch.bfloat16 or torch.float8_e4m3fn, got {out_dtype}')


def _canonical_nan(t):
    if t.dtype == torch.float32:
        return t.view(torch.int32).masked_fill(torch.isnan(t), _FP32_NAN_BITS).view(torch.float32)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).masked_fill(torch.isnan(t), _BF16_NAN).view(torch.bfloat16)
    return t.view(torch.uint8).masked_fill(torch.isnan(t.float()), _E4M3_NAN).view(torch.float8_e4m3fn)


def _rne(x, dtype):
    """Round-to-nearest-even conversion as the kernels do it."""
    if dtype == torch.float8_e4m3fn:
        # satfinite: clamp first (inf -> 448); NaN -> 0x7F.
        v = x.float()
        return v.clamp(-448.0, 448.0).to(dtype).view(torch.uint8).masked_fill(torch.isnan(v), _E4M3_NAN).view(dtype)
    if x.dtype == torch.bfloat16 and dtype == torch.float32:
        return x.float()  # exact, NaN payload kept (the kernel shifts the bits)
    return _canonical_nan(x.float().to(dtype))


def cast_dtype(x, dtype, stochastic_rounding=False):
    """Reference of ``quant.cast``: element-wise conversion of contiguous ``x`` to ``dtype``.

    Round-to-nearest-even (e4m3: saturating, inf -> 448) or, with
    ``stochastic_rounding``, the deterministic stochastic rounding of §2.2 with q
    the global quad index of the flattened tensor. NaN outputs are the
    canonical positive NaN, except bf16 -> fp32, which is exact bit widening.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'x must be a torch.Tensor, got {type(x).__name__}')
    pairs = STOCHASTIC_PAIRS if stochastic_rounding else RNE_PAIRS
    if (x.dtype, dtype) not in pairs:
        raise ValueError(f'unsupported cast {x.dtype} -> {dtype} (stochastic_rounding={stochastic_rounding}); '
                         f'allowed: {[(str(a), str(b)) for a, b in pairs]}')
    if not stochastic_rounding:
        return _rne(x, dtype)
    if x.numel() % 4:
        raise ValueError(f'stochastic_rounding needs numel % 4 == 0, got {x.numel()}')
    return stochastic_round(x, dtype).reshape(x.shape)
