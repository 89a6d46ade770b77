"""Bit-exact PyTorch references for KernelKiln's block quantizers.

These functions define the numerics that the GPU kernels must reproduce bit for
bit (docs/SPEC.md §2.1, §2.2). They use plain torch ops only, run on any device,
and do every computation in float32.

Two rules keep the results identical on CPU and CUDA:

* Every division has tensors on both sides. ``tensor / python_float`` may be
  lowered to a multiply by the reciprocal and ``python_float / tensor`` to
  ``reciprocal() * float`` (two roundings), so neither is used here.
* NaN has one canonical encoding (positive). GPU arithmetic returns a positive
  canonical NaN while CPUs keep the input NaN's sign, so a sign taken from a NaN
  would depend on the device.
"""

import math

import torch

# shared with the ops (kernelkiln._formats): format ranges, amax floors, UE8M0 packing, the e2m1 decoder
from kernelkiln._formats import DEFAULT_CLAMP_MIN as _DEFAULT_CLAMP_MIN
from kernelkiln._formats import E2M1_MAGNITUDES as _E2M1_MAGNITUDES  # noqa: F401
from kernelkiln._formats import FMT_MAX, unpack_from_e2m1fn_x2  # noqa: F401
from kernelkiln._formats import pack_ue8m0_bytes as _pack_ue8m0
from kernelkiln._formats import ue8m0_bytes as _ue8m0_bytes

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "FMT_MAX",
    "cast",
    "cast_back",
    "default_clamp_min",
    "get_sf_shape",
    "pack_e2m1",
    "per_token_cast_ref",
    "unpack_from_e2m1fn_x2",
]

_QUANT_FMTS = ('e4m3', 'e2m1')
_BACK_FMTS = {'bf16': torch.bfloat16, 'fp32': torch.float32}
# The NaN that CUDA arithmetic and cvt produce, used for every NaN cast_back returns.
_CANONICAL_NAN_BITS = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float32: (torch.int32, 0x7FFFFFFF)}
_PLAIN_INPUT_DTYPES = (torch.bfloat16, torch.float32)
_SF_DTYPES = (torch.float32, torch.float8_e4m3fn, torch.int32)

# e2m1 magnitudes, indexed by the 3-bit code.
_E2M1_NAN_CODE = 7
_E4M3_NAN_BYTE = 0x7F
_UE8M0_BIAS = 127
_FP32_MANTISSA_BITS = 23


# ---------------------------------------------------------------- validation

def _check_choice(name, value, allowed):
    if value not in allowed:
        raise ValueError(f'{name} must be one of {tuple(allowed)}, got {value!r}')


def _check_block(name, block):
    if not (isinstance(block, (tuple, list)) and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) for b in block)):
        raise TypeError(f'{name} must be a pair of ints (rows, cols), got {block!r}')
    if block[0] < 1 or block[1] < 1:
        raise ValueError(f'{name} entries must be >= 1, got {tuple(block)}')
    return int(block[0]), int(block[1])


def _check_2d(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f'{name} must be a torch.Tensor, got {type(t).__name__}')
    if t.dim() != 2:
        raise ValueError(f'{name} must be 2-D, got shape {tuple(t.shape)}')


def _check_scale_flags(round_sf, use_packed_ue8m0, use_e4m3_sf):
    if round_sf and use_e4m3_sf:
        raise ValueError('round_sf and use_e4m3_sf are mutually exclusive; set at most one')
    if use_packed_ue8m0 and not round_sf:
        raise ValueError('use_packed_ue8m0=True requires round_sf=True (UE8M0 holds powers of two only)')


def default_clamp_min(fmt, use_e4m3_sf=False):
    """The default amax floor for ``fmt`` in {'e4m3', 'e2m1'}."""
    _check_choice('fmt', fmt, _QUANT_FMTS)
    return _DEFAULT_CLAMP_MIN[(fmt, bool(use_e4m3_sf))]


def get_sf_shape(shape, block_size):
    """Logical scale shape ``(ceil(M/gm), ceil(K/g))``, before packing or transposition."""
    if len(shape) != 2:
        raise ValueError(f'shape must be (M, K), got {tuple(shape)}')
    gm, g = _check_block('block_size', block_size)
    m, k = (int(s) for s in shape)
    return -(-m // gm), -(-k // g)


# ------------------------------------------------------------ fp32 helpers

def _const(like, value):
    """An fp32 tensor filled with ``value`` (rounded to fp32 once, like a kernel constant)."""
    return torch.full_like(like, value, dtype=torch.float32)


def _ceil_log2_exponent(v):
    """ceil(log2(v)) for positive fp32 ``v``, from the bits as the kernels do it.

    Subtracting 1 from the bits makes an exact power of two fall back into the
    previous binade, so it maps to itself while anything above rounds up.
    """
    bits = v.view(torch.int32)
    return ((bits - 1) >> _FP32_MANTISSA_BITS) + 1 - _UE8M0_BIAS


def _exp2_exact(e):
    """fp32 2**e for int32 ``e`` in [-126, 128], built by placing the exponent field (128: +inf)."""
    return ((e + _UE8M0_BIAS) << _FP32_MANTISSA_BITS).view(torch.float32)


def _exp2_inverse(e):
    """The data multiplier 2**-e of a power-of-two scale 2**e: 0 where the scale is +inf (e = 128, a block holding
    an inf: its finite values become signed zeros and the inf NaN, as x / inf gives). Finite amax has e <= 120."""
    return torch.where(e > 126, torch.zeros((), dtype=torch.float32, device=e.device), _exp2_exact(-e))


def _ue8m0_decode(b):
    """fp32 whose bits are ``byte << 23`` (byte 0 decodes to 0.0)."""
    return (b.to(torch.int32) << _FP32_MANTISSA_BITS).view(torch.float32)


# ------------------------------------------------------- element encoders

def _to_e4m3(v):
    """Saturating round-to-nearest-even fp32 -> e4m3fn, with NaN pinned to 0x7F."""
    fmt_max = FMT_MAX['e4m3']
    q = v.clamp(-fmt_max, fmt_max).to(torch.float8_e4m3fn)
    bits = q.view(torch.uint8).masked_fill(torch.isnan(v), _E4M3_NAN_BYTE)
    return bits.view(torch.float8_e4m3fn)


def _e2m1_nibbles(y):
    """RNE onto {0,.5,1,1.5,2,3,4,6}, saturating at 6, as int32 nibbles sign<<3 | code.

    Each binade range is rescaled so the grid spacing becomes 1; then
    torch.round (half-to-even) picks the code and even codes win ties.
    """
    a = y.abs()
    below2, below4 = a < 2, a < 4
    t = torch.where(below2, a * 2, torch.where(below4, a, a * 0.5))
    offset = torch.where(below2, _const(a, 0.0), torch.where(below4, _const(a, 2.0), _const(a, 4.0)))
    code = torch.clamp(torch.round(t) + offset, max=float(_E2M1_NAN_CODE))
    code = code.masked_fill(torch.isnan(a), float(_E2M1_NAN_CODE))
    # signbit, not y < 0: -0.0 and tiny negatives keep their sign (nibble 0x8).
    negative = torch.signbit(y) & ~torch.isnan(y)
    return code.to(torch.int32) | (negative.to(torch.int32) << 3)


def pack_e2m1(nibbles):
    """Pack 4-bit codes ``[..., 2K]`` (ints in 0..15) into int8 ``[..., K]``.

    Element 2j goes in the low nibble and element 2j+1 in the high nibble.
    """
    if not isinstance(nibbles, torch.Tensor) or nibbles.is_floating_point() or nibbles.is_complex():
        raise TypeError('nibbles must be an integer torch.Tensor')
    if nibbles.dim() == 0 or nibbles.shape[-1] % 2:
        raise ValueError(f'the last dim of nibbles must be even, got shape {tuple(nibbles.shape)}')
    n = nibbles.to(torch.int32)
    if n.numel() and (n.min() < 0 or n.max() > 15):
        raise ValueError('nibbles must lie in 0..15')
    return _pack_nibbles(n)


def _pack_nibbles(n):
    """pack_e2m1 without validation (cast's nibbles are in range by construction)."""
    packed = n[..., 0::2] | (n[..., 1::2] << 4)
    # Through uint8: int32 -> int8 conversion of 128..255 is not portable.
    return packed.to(torch.uint8).view(torch.int8)


def _encode_stochastic_rows(y, fmt):
    """Stochastic e4m3 of fp32 ``y [T, H]``; the hash's quad index restarts at 0 on every row."""
    from .stochastic import e4m3_byte_stochastic, fp32_bits, quad_random_bits
    if fmt != 'e4m3' or y.shape[1] % 4:
        raise ValueError(f"stochastic rounding needs fmt='e4m3' and H % 4 == 0, got {fmt!r}, H={y.shape[1]}")
    t, h = y.shape
    bits = fp32_bits(y.reshape(-1))
    quads = torch.arange(h // 4, dtype=torch.int64, device=y.device).repeat(t)
    r0, _ = quad_random_bits(bits, quad_index=quads)
    r16 = torch.stack((r0 & 0xFFFF, r0 & 0xFFFF, r0 >> 16, r0 >> 16), dim=1).reshape(-1)
    return e4m3_byte_stochastic(bits, r16).to(torch.uint8).view(torch.float8_e4m3fn).reshape(t, h)


def _encode(y, fmt):
    if fmt == 'e4m3':
        return _to_e4m3(y)
    return _pack_nibbles(_e2m1_nibbles(y))


# ---------------------------------------------------------- block helpers

def _block_amax(x, block):
    """max |x| per (gm, g) block, NaN counted as 0; partial edge blocks are padded with 0."""
    gm, g = block
    m, k = x.shape
    mb, kb = get_sf_shape((m, k), block)
    a = x.abs()
    a = a.masked_fill(torch.isnan(a), 0.0)
    # Zero padding cannot raise a max of absolute values, so it is excluded in effect.
    padded = a.new_zeros((mb * gm, kb * g))
    padded[:m, :k] = a
    return padded.reshape(mb, gm, kb, g).amax(dim=(1, 3))


def _expand(s, block, shape):
    """Broadcast per-block fp32 values to every element of a ``shape`` tensor."""
    gm, g = block
    m, k = shape
    return s.repeat_interleave(gm, dim=0)[:m].repeat_interleave(g, dim=1)[:, :k]


def _ue8m0_pack_dim(block):
    # Per-channel blocks (gm, 1) pack along M ("col pack"); everything else along K.
    return 0 if block[1] == 1 and block[0] > 1 else 1


def _packed_shape(sf_shape, dim):
    mb, kb = sf_shape
    return (-(-mb // 4), kb) if dim == 0 else (mb, -(-kb // 4))


def _unpack_ue8m0(packed, sf_shape, dim):
    """Inverse of ``_pack_ue8m0``: int32 words -> uint8 bytes of logical shape ``sf_shape``."""
    if dim == 0:
        return _unpack_ue8m0(packed.T, sf_shape[::-1], 1).T
    mb, kb = sf_shape
    # Copy into fresh storage first: a size-1 dim may carry any stride (e.g. a column-major
    # (1, 1) tensor, which torch calls contiguous and reshapes keeping stride 4), and
    # view(uint8) needs a unit inner stride.
    flat = packed.new_empty(packed.numel()).copy_(packed.reshape(-1)).view(torch.uint8)
    return flat.reshape(packed.shape[0], 4 * packed.shape[1])[:mb, :kb]  # explicit: packed may have 0 rows


def _to_tma_col_major(sf):
    """Same logical ``(Mb, K_sf)`` tensor with strides ``(1, A)``, A = Mb aligned to 16 bytes."""
    mb, k_sf = sf.shape
    align = 16 // sf.element_size()
    a = -(-mb // align) * align
    storage = torch.zeros((k_sf, a), dtype=sf.dtype, device=sf.device)
    storage[:, :mb] = sf.T
    return storage.T[:mb]


# ----------------------------------------------------------------- scales

def _compute_scales(amax, fmt, round_sf, use_e4m3_sf):
    """(stored sf, fp32 multiplier sf_inv) from clamped per-block amax."""
    fmt_max = _const(amax, FMT_MAX[fmt])
    if round_sf:
        # Multiply by the fp32-rounded reciprocal, as the kernels do; the
        # power-of-two bin is then taken from the bits.
        e = _ceil_log2_exponent(amax * _const(amax, 1.0 / FMT_MAX[fmt]))
        return _exp2_exact(e), _exp2_inverse(e)
    if use_e4m3_sf:
        sf = _to_e4m3(amax / fmt_max)
        # The reciprocal of the *rounded* scale, so decode(q) * sf reproduces x.
        return sf, _const(amax, 1.0) / sf.float()
    # sf_inv is computed directly, not as 1/sf, to avoid a second rounding.
    return amax / fmt_max, fmt_max / amax


# ------------------------------------------------------- quantized inputs

def _decode_data(data):
    """fp32 values of e4m3 data ``[T, H]`` or packed e2m1 int8 ``[T, H/2]``."""
    if data.dtype == torch.float8_e4m3fn:
        return data.float()
    if data.dtype == torch.int8:
        return unpack_from_e2m1fn_x2(data)
    raise TypeError(f'quantized data must be torch.float8_e4m3fn or torch.int8 (packed e2m1), got {data.dtype}')


def _decode_sf(sf, block, data_shape, name):
    """fp32 per-block scales of logical shape get_sf_shape(data_shape, block).

    Any layout is accepted: a TMA column-major sf has the same logical shape
    and torch indexing follows its strides.
    """
    _check_2d(name, sf)
    if sf.dtype not in _SF_DTYPES:
        raise TypeError(f'{name} dtype must be one of {_SF_DTYPES}, got {sf.dtype}')
    sf_shape = get_sf_shape(data_shape, block)
    if sf.dtype == torch.int32:
        dim = _ue8m0_pack_dim(block)
        expected = _packed_shape(sf_shape, dim)
        if tuple(sf.shape) != expected:
            raise ValueError(f'{name} (packed UE8M0) must have shape {expected}, got {tuple(sf.shape)}')
        return _ue8m0_decode(_unpack_ue8m0(sf, sf_shape, dim))
    if tuple(sf.shape) != sf_shape:
        raise ValueError(f'{name} must have shape {sf_shape}, got {tuple(sf.shape)}')
    return sf.float()


def _dequantize(x, x_block_size):
    """(decode(data), sf[block] expanded to the data's shape) for a (data, sf) pair."""
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError('x must be a (data, sf) pair of tensors')
    block = _check_block('x_block_size', x_block_size)
    data, sf = x
    _check_2d('x[0] (data)', data)
    values = _decode_data(data)
    sf32 = _decode_sf(sf, block, values.shape, 'x[1] (sf)')
    return values, _expand(sf32, block, values.shape)


def _input_fp32(x, x_block_size):
    """(fp32 values, input scale or None): a pre-quantized input keeps its scale separate,
    because the kernels apply ``x_sf * sf_inv`` to the data as one product (docs/SPEC.md §2.1)."""
    if isinstance(x, (tuple, list)):
        if x_block_size is None:
            raise ValueError('x_block_size is required when x is a (data, sf) pair')
        return _dequantize(x, x_block_size)
    _check_2d('x', x)
    if x_block_size is not None:
        raise ValueError('x_block_size is only allowed when x is a (data, sf) pair')
    if x.dtype not in _PLAIN_INPUT_DTYPES:
        raise TypeError(f'x dtype must be torch.bfloat16 or torch.float32, got {x.dtype}')
    return x.float(), None


# ------------------------------------------------------------ public API

def cast(x, fmt, block_size=(32, 32), sf=None, x_block_size=None, round_sf=False,
         use_tma_aligned_col_major_sf=False, use_packed_ue8m0=False, use_e4m3_sf=False,
         clamp_min_value=None, stochastic=False):
    """Quantize ``x`` to ``fmt`` with one scale per ``block_size = (gm, g)`` block.

    x: bf16/fp32 ``[T, H]``, or a ``(data, sf)`` pair of already-quantized input
        (e4m3 data or int8-packed e2m1; fp32, e4m3 or packed-UE8M0 int32 sf, any
        layout) described by ``x_block_size``; it is dequantized first.
    fmt: 'e4m3' (returns float8_e4m3fn ``[T, H]``) or 'e2m1' (int8 ``[T, H/2]``).
    sf: optional precomputed row-major fp32/e4m3 scales of shape
        ``get_sf_shape((T, H), block_size)``. Then the multiplier is
        ``1 / float32(sf)`` and **only the quantized data is returned**;
        round_sf and use_e4m3_sf do not change the result in that case.
    clamp_min_value: amax floor; None means ``default_clamp_min(fmt, use_e4m3_sf)``.
    stochastic: e4m3 only: round the scaled values with the deterministic stochastic
        rounding of docs/SPEC.md §2.2 (``per_token_cast(..., stochastic_cast=True)``),
        the quad index counting 4-value groups from the start of each row.

    Returns ``(q, sf)`` where sf is fp32, e4m3 (use_e4m3_sf) or packed int32
    (use_packed_ue8m0), optionally in the TMA-aligned column-major layout.
    """
    _check_choice('fmt', fmt, _QUANT_FMTS)
    block = _check_block('block_size', block_size)
    _check_scale_flags(round_sf, use_packed_ue8m0, use_e4m3_sf)
    values, in_scale = _input_fp32(x, x_block_size)
    # amax is taken over the dequantized values; the data is then scaled by one multiplier.
    x32 = values if in_scale is None else values * in_scale
    if fmt == 'e2m1' and x32.shape[1] % 2:
        raise ValueError(f'e2m1 packs two values per byte, so H must be even, got H={x32.shape[1]}')

    if sf is not None:
        return _cast_with_given_sf(values, in_scale, fmt, block, sf, use_tma_aligned_col_major_sf,
                                   use_packed_ue8m0, use_e4m3_sf)

    clamp_min = _clamp_min(fmt, use_e4m3_sf, clamp_min_value)
    amax = _block_amax(x32, block)
    amax = torch.maximum(amax, _const(amax, clamp_min))
    sf_out, sf_inv = _compute_scales(amax, fmt, round_sf, use_e4m3_sf)
    scaled = values * _multiplier(in_scale, _expand(sf_inv, block, x32.shape))
    q = _encode_stochastic_rows(scaled, fmt) if stochastic else _encode(scaled, fmt)

    if use_packed_ue8m0:
        sf_out = _pack_ue8m0(_ue8m0_bytes(sf_out), _ue8m0_pack_dim(block))
    if use_tma_aligned_col_major_sf:
        sf_out = _to_tma_col_major(sf_out)
    return q, sf_out


def _clamp_min(fmt, use_e4m3_sf, clamp_min_value):
    if clamp_min_value is None:
        return default_clamp_min(fmt, use_e4m3_sf)
    value = float(clamp_min_value)
    # A zero floor would let an all-zero block produce sf = 0 and sf_inv = inf.
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f'clamp_min_value must be a finite positive float, got {clamp_min_value!r}')
    return value


def _multiplier(in_scale, sf_inv):
    return sf_inv if in_scale is None else in_scale * sf_inv


def _cast_with_given_sf(values, in_scale, fmt, block, sf, col_major, packed, use_e4m3_sf):
    if col_major or packed:
        raise ValueError('use_tma_aligned_col_major_sf and use_packed_ue8m0 must be False when sf is given')
    _check_2d('sf', sf)
    if sf.dtype not in (torch.float32, torch.float8_e4m3fn):
        raise TypeError(f'sf must be torch.float32 or torch.float8_e4m3fn (not packed), got {sf.dtype}')
    if use_e4m3_sf and sf.dtype != torch.float8_e4m3fn:
        raise ValueError('use_e4m3_sf=True requires sf of dtype torch.float8_e4m3fn')
    if sf.shape[1] > 1 and sf.stride(1) != 1:
        raise ValueError('sf must be row-major (stride(1) == 1)')
    sf32 = _decode_sf(sf, block, values.shape, 'sf')
    sf_inv = _const(sf32, 1.0) / sf32
    return _encode(values * _multiplier(in_scale, _expand(sf_inv, block, values.shape)), fmt)


def cast_back(x, fmt, block_size=(32, 32)):
    """Dequantize a ``(data, sf)`` pair: ``decode(data) * sf[block]`` in fp32, then to ``fmt``.

    fmt: 'bf16' or 'fp32'. block_size: the (gm, g) block of ``sf`` (the peer's name and default).
    """
    _check_choice('fmt', fmt, tuple(_BACK_FMTS))
    values, scale = _dequantize(x, block_size)
    out = (values * scale).to(_BACK_FMTS[fmt])
    return _canonicalize_nan(out)


def _canonicalize_nan(t):
    # CPU conversions keep NaN sign and payload (an e4m3 NaN decodes to
    # 0xFFFF in bf16 on CPU but 0x7FFF on CUDA), so pin one encoding.
    int_dtype, bits = _CANONICAL_NAN_BITS[t.dtype]
    return t.view(int_dtype).masked_fill(torch.isnan(t), bits).view(t.dtype)


def per_token_cast_ref(x, fmt, num_per_channels, **kwargs):
    """``cast`` with one scale per ``num_per_channels`` consecutive channels of each row."""
    if not isinstance(num_per_channels, int) or isinstance(num_per_channels, bool):
        raise TypeError(f'num_per_channels must be an int, got {num_per_channels!r}')
    return cast(x, fmt, (1, num_per_channels), **kwargs)
