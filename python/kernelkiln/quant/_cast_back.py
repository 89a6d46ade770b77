"""cast_back / per_token_cast_back (dequantization) and per_token_cast_and_cast_back (fake quant).

tile_kernels 2.1 signatures. Input x = (data, sf): e4m3 [T, H] or packed e2m1 int8
[T, H/2]; sf fp32 / e4m3 / packed-UE8M0 int32 over blocks (gm, g), row-major or
TMA-aligned column-major (not for per-channel g == 1, whose packed scales go along M).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln._ops.launch import has_variant, launch
from kernelkiln.quant import _per_token
from kernelkiln_contract.quant import CAST_BACK as CONTRACT
from kernelkiln_contract.quant import cast_back_per_channel

OP = CONTRACT.op
OUT_FORMATS = {"bf16": torch.bfloat16, "fp32": torch.float32}
_OUT_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_SF_MODE = {torch.float32: 0, torch.float8_e4m3fn: 1, torch.int32: 2}  # kernels/quant/cast_back.py SF_*
# the kernel's scale buffer of each storage (it reads the one sf_mode selects; the other two are passed as 0)
_SF_BUFFER = {torch.float32: "sf", torch.float8_e4m3fn: "sf_e4m3", torch.int32: "sf_bytes"}
_ROWS = 4  # kernels/quant/cast_back.py ROWS: per-channel blocks need gm % ROWS == 0
_ceil_div = _per_token._ceil_div


def _check_special(x_special_fmt):
    # 'e5m6' never gets here: cast_back forwards it to the v1 E5M6 decoder (kernelkiln/quant/_e5m6.py).
    if x_special_fmt is not None:
        raise ValueError(f"x_special_fmt must be None (tile_kernels 2.1) or 'e5m6' (v1), got {x_special_fmt!r}")


def _check_block(x_block_size):
    if not (isinstance(x_block_size, (tuple, list)) and len(x_block_size) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) for v in x_block_size)):
        raise TypeError(f"x_block_size must be a (gm, g) pair of ints, got {x_block_size!r}")
    gm, g = x_block_size
    if gm < 1 or not (g == 1 or (g >= 16 and g % 16 == 0)):
        raise ValueError(f"x_block_size must be (gm, g) with gm >= 1 and g == 1 (per-channel) or a multiple of 16, "
                         f"got {tuple(x_block_size)}")
    if g == 1 and gm % _ROWS:
        raise ValueError(f"per-channel x_block_size (gm, 1) needs gm to be a multiple of {_ROWS}, got {gm}")
    return gm, g


def _check_input(x, x_block_size, check_ptr=True):
    """Validated (data, sf, t, h, block, packed_along_m)."""
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError("x must be a (data, sf) pair of tensors")
    gm, g = _check_block(x_block_size)
    data, sf = x
    checks.tensor("x[0] (data)", data, (torch.float8_e4m3fn, torch.int8), ndim=2)
    checks.tensor("x[1] (sf)", sf, tuple(_SF_MODE), ndim=2)
    fp4 = data.dtype == torch.int8
    t, h = data.shape[0], data.shape[1] * (2 if fp4 else 1)
    if h % 64 or h == 0:
        raise ValueError(f"the logical hidden size of x[0] must be a positive multiple of 64, got {h}")
    unit = 8 if fp4 else 16  # bytes each thread loads per row
    if data.stride(1) != 1 or (t > 1 and data.stride(0) % unit):
        raise ValueError(f"x[0] must have inner stride 1 and a row stride that is a multiple of {unit} bytes; "
                         f"got strides {tuple(data.stride())}")
    if check_ptr:  # fake tensors (register_fake) have no address
        checks.aligned("x[0] (data)", data, unit)
    mb, kb = _ceil_div(t, gm), _ceil_div(h, g)
    along_m = sf.dtype == torch.int32 and g == 1 and gm > 1  # per-channel "col pack" (docs/SPEC.md §2.1)
    if sf.dtype == torch.int32:
        expected = (_ceil_div(mb, 4), kb) if along_m else (mb, _ceil_div(kb, 4))
    else:
        expected = (mb, kb)
    if tuple(sf.shape) != expected:
        raise ValueError(f"x[1] (sf, {sf.dtype}) must have shape {expected} for x_block_size {(gm, g)} and "
                         f"data shape {tuple(data.shape)}, got {tuple(sf.shape)}")
    if g == 1 and sf.shape[0] > 1 and sf.shape[1] > 1 and sf.stride(1) != 1:
        raise ValueError("per-channel scales (g == 1) must be row-major; column-major sf is not allowed with g == 1")
    checks.same_device("x[1] (sf)", sf, "x[0] (data)", data)
    return data, sf, t, h, (gm, g), along_m


def _run(data, sf, t, h, block, along_m, out):
    if t == 0:
        return
    gm, g = block
    fp4 = data.dtype == torch.int8
    s0, s1 = sf.stride()
    packed = sf.dtype == torch.int32
    st, sk = (4 * s0, 4 * s1) if packed else (s0, s1)
    shift_m, shift_k = ((2, 0) if along_m else (0, 2)) if packed else (0, 0)
    scales = dict.fromkeys(_SF_BUFFER.values(), 0)
    scales[_SF_BUFFER[sf.dtype]] = sf.data_ptr()
    values = CONTRACT.key(fmt="e2m1" if fp4 else "e4m3", out_dtype=_OUT_NAMES[out.dtype],
                          per_channel=cast_back_per_channel(g))
    launch(CONTRACT, values, data.device, x=data.data_ptr(), out=out.data_ptr(), **scales, num_tokens=t,
           hidden_div64=h // 64, x_stride_unit=data.stride(0) // (8 if fp4 else 16),
           out_stride_unit=out.stride(0) // 16, block_m=gm, block_k=g, sf_mode=_SF_MODE[sf.dtype], sf_stride_t=st,
           sf_stride_k=sk, pack_shift_m=shift_m, pack_shift_k=shift_k)


def cast_back(x, fmt, x_block_size, x_special_fmt=None):
    """Dequantize (data, sf): ``decode(data) * sf[block]`` in fp32, rounded once to ``fmt`` ('bf16' / 'fp32').

    Same signature and result as tile_kernels 2.1 ``quant.cast_back``. Under ``torch.compile``
    the call goes through the registered op ``kernelkiln::cast_back``.
    """
    if x_special_fmt == "e5m6":  # v1's E5M6 path (kernelkiln/quant/_e5m6.py)
        from kernelkiln.quant._e5m6 import cast_back_e5m6
        return cast_back_e5m6(x, fmt, x_block_size)
    if torch.compiler.is_compiling() and x_special_fmt is None and isinstance(x, (tuple, list)) and len(x) == 2:
        return torch.ops.kernelkiln.cast_back(x[0], x[1], fmt, list(x_block_size))
    return _cast_back(x, fmt, x_block_size, x_special_fmt)


def _cast_back(x, fmt, x_block_size, x_special_fmt=None):
    _check_special(x_special_fmt)
    checks.choice("fmt", fmt, tuple(OUT_FORMATS))
    data, sf, t, h, block, along_m = _check_input(x, x_block_size)
    checks.cuda("x[0] (data)", data)
    out = torch.empty((t, h), dtype=OUT_FORMATS[fmt], device=data.device)
    _run(data, sf, t, h, block, along_m, out)
    return out


def per_token_cast_back(x, fmt, num_per_channels, x_special_fmt=None):
    """``cast_back`` with block (1, num_per_channels)."""
    if not isinstance(num_per_channels, int) or isinstance(num_per_channels, bool):
        raise TypeError(f"num_per_channels must be an int, got {num_per_channels!r}")
    return cast_back(x, fmt, (1, num_per_channels), x_special_fmt)


def per_token_cast_and_cast_back(x, fmt, num_per_channels, round_sf=False, use_e4m3_sf=False):
    """In-place fake quantization: x <- cast_back(per_token_cast(x, ...)); returns None.

    One pass where the manifest built the "roundtrip" per_token_cast variant (quantize, decode,
    times the scale in fp32, write back); otherwise two kernels (quantize into a scratch (q, sf),
    dequantize straight into x). Both are bit-identical to the reference composition.
    """
    checks.tensor("x", x, (torch.bfloat16, torch.float32), ndim=2)
    _per_token._check_options(fmt, num_per_channels, round_sf, False, use_e4m3_sf, False)
    t, h = x.shape
    if h % 64 or h == 0:
        raise ValueError(f"x.shape[1] (hidden) must be a positive multiple of 64, got {h}")
    if x.stride(1) != 1 or (t > 1 and x.stride(0) % 16):
        raise ValueError(f"x must have inner stride 1 and a row stride that is a multiple of 16 elements; "
                         f"got strides {tuple(x.stride())}")
    checks.aligned("x", x, 16)
    checks.cuda("x", x)
    if t == 0:
        return None
    if has_variant(_per_token.CONTRACT, _per_token.roundtrip_values(x, fmt, num_per_channels, use_e4m3_sf),
                   x.device.index):
        _per_token.run_roundtrip(x, fmt, num_per_channels, round_sf, use_e4m3_sf)
        return None
    q, sf = _per_token.per_token_cast(x, fmt, num_per_channels, round_sf=round_sf, use_e4m3_sf=use_e4m3_sf)
    _run(q, sf, t, h, (1, num_per_channels), False, x)
    return None


# ---- torch.library ops (declared here, registered on the first lookup of one in torch.ops.kernelkiln) ----

@library_op("cast_back", mutates_args=())
def _cast_back_op(data: torch.Tensor, sf: torch.Tensor, fmt: str, x_block_size: list[int]) -> torch.Tensor:
    return _cast_back((data, sf), fmt, tuple(x_block_size))


@_cast_back_op.register_fake
def _cast_back_op_fake(data, sf, fmt, x_block_size):
    checks.choice("fmt", fmt, tuple(OUT_FORMATS))
    _, _, t, h, _, _ = _check_input((data, sf), tuple(x_block_size), check_ptr=False)
    return data.new_empty((t, h), dtype=OUT_FORMATS[fmt])
