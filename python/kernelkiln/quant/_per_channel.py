"""per_channel_cast (tile_kernels 2.1 signature): per-column FP8 scaling over gm-token blocks.

x [T, H] bf16/fp32 row-major, or (e4m3 data [T, H] row-major, sf [T, H/g] fp32 in any layout
-- row-major, column-major, token-sliced column-major) with g = num_per_channels in {32, 128};
fmt 'e4m3', gm = num_per_tokens in {32, 128}, T % 128 == 0, H % 128 == 0 -> (q [T, H] e4m3
row-major, sf [T/gm, H] fp32) or, with use_packed_ue8m0, sf int32 [ceil(T/gm/4), H] ("col pack":
byte i of word [r, c] is token block 4r+i).
Reference: ``kernelkiln.torch.cast(x, 'e4m3', (gm, 1), round_sf=..., use_packed_ue8m0=...,
x_block_size=(1, g) for FP8 input)``.

Also v1 ``per_channel_cast_fused`` (same kernel, "tail"/"gather" row modes).
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.quant_fused import PER_CHANNEL_CAST as CONTRACT
from kernelkiln_contract.quant_fused import per_channel_in_block, per_channel_rows

OP = CONTRACT.op
FORMATS = ("e4m3",)
TOKEN_BLOCKS = (32, 128)
IN_BLOCKS = (32, 128)
_IN = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_DTYPE_NAME = {**_IN, torch.float8_e4m3fn: "float8_e4m3fn"}


def _check_fp8_pair(x, num_per_channels, allowed_g=IN_BLOCKS):
    """(data, sf) of a pre-quantized input: e4m3 [T, H] row-major, fp32 sf [T, H/g] (any strides)."""
    if len(x) != 2:
        raise ValueError(f"x must be a tensor or a (data, sf) pair, got a sequence of {len(x)}")
    data, x_sf = x
    checks.tensor("x[0] (data)", data, (torch.float8_e4m3fn,), ndim=2)
    checks.tensor("x[1] (sf)", x_sf, (torch.float32,), ndim=2)
    if isinstance(num_per_channels, bool) or not isinstance(num_per_channels, int):
        raise TypeError(f"num_per_channels must be an int (the input's channels per scale, one of {allowed_g}) "
                        f"for (data, sf) input, got {num_per_channels!r}")
    checks.choice("num_per_channels", num_per_channels, allowed_g)
    t, h = data.shape
    if h % num_per_channels == 0 and tuple(x_sf.shape) != (t, h // num_per_channels):
        raise ValueError(f"x[1] (sf) must have shape {(t, h // num_per_channels)} for data {tuple(data.shape)} "
                         f"and num_per_channels={num_per_channels}, got {tuple(x_sf.shape)}")
    if not data.is_contiguous():
        raise ValueError(f"x[0] (data) must be contiguous (row-major), got strides {tuple(data.stride())}")
    return data, x_sf


def _check_common(x, fmt, num_per_tokens, round_sf, num_per_channels, plain_dtypes, in_blocks, token_blocks):
    """The checks per_channel_cast and per_channel_cast_fused share. Returns (data, x_sf or None)."""
    if isinstance(x, (tuple, list)):
        data, x_sf = _check_fp8_pair(x, num_per_channels, in_blocks)
    else:
        if num_per_channels is not None:
            names = "/".join({torch.bfloat16: "bf16", torch.float32: "fp32"}[d] for d in plain_dtypes)
            raise ValueError(f"num_per_channels describes a pre-quantized input's scale blocks and must be None "
                             f"for {names} x, got {num_per_channels!r}")
        checks.tensor("x", x, plain_dtypes, ndim=2)
        data, x_sf = x, None
    checks.choice("fmt", fmt, FORMATS)
    if isinstance(num_per_tokens, bool) or not isinstance(num_per_tokens, int):
        raise TypeError(f"num_per_tokens must be an int, got {type(num_per_tokens).__name__}")
    checks.choice("num_per_tokens", num_per_tokens, token_blocks)
    checks.flag("round_sf", round_sf)
    return data, x_sf


def check_args(x, fmt, num_per_tokens, round_sf, num_per_channels, use_packed_ue8m0):
    """Every check that needs no GPU (shared by the op and its fake). Returns (data, x_sf or None)."""
    data, x_sf = _check_common(x, fmt, num_per_tokens, round_sf, num_per_channels, tuple(_IN), IN_BLOCKS,
                               TOKEN_BLOCKS)
    checks.scale_flags(round_sf, use_packed_ue8m0)
    t, h = data.shape
    if t % 128 or h % 128:
        raise ValueError(f"x must have T % 128 == 0 and H % 128 == 0, got shape {tuple(data.shape)}")
    if not data.is_contiguous():
        raise ValueError(f"x must be contiguous (row-major), got strides {tuple(data.stride())}")
    return data, x_sf


def alloc(x, num_per_tokens, use_packed_ue8m0):
    t, h = x.shape
    q = torch.empty((t, h), dtype=torch.float8_e4m3fn, device=x.device)
    blocks = t // num_per_tokens
    if use_packed_ue8m0:
        words = -(-blocks // 4)
        # Unused bytes of the last word are zero, like the reference's packing.
        sf = (torch.zeros if blocks % 4 else torch.empty)((words, h), dtype=torch.int32, device=x.device)
    else:
        sf = torch.empty((blocks, h), dtype=torch.float32, device=x.device)
    return q, sf


def per_channel_cast(x, fmt, num_per_tokens, round_sf=False, num_per_channels=None, use_packed_ue8m0=False):
    """Quantize each column in blocks of ``num_per_tokens`` rows; returns (q, sf)."""
    data, x_sf = check_args(x, fmt, num_per_tokens, round_sf, num_per_channels, use_packed_ue8m0)
    checks.cuda("x", data)
    checks.aligned("x", data, 16)
    if x_sf is not None:
        checks.cuda("x[1] (sf)", x_sf)
        if x_sf.device != data.device:
            raise ValueError(f"x[1] (sf) must be on {data.device}, got {x_sf.device}")
    q, sf = alloc(data, num_per_tokens, use_packed_ue8m0)
    t, h = data.shape
    if t == 0:
        return q, sf
    values = CONTRACT.key(in_dtype=_DTYPE_NAME[data.dtype], num_per_tokens=num_per_tokens,
                          sf_kind="ue8m0" if use_packed_ue8m0 else "fp32",
                          in_block=per_channel_in_block(num_per_channels, x_sf is not None),
                          rows=per_channel_rows(fused=False, gather=False))
    clamp = config.get_amax_clamp_for_quant("e4m3", False)
    launch(CONTRACT, values, data.device, **_args(data, x_sf, None, q, sf, -(-t // num_per_tokens), round_sf, clamp, t))
    return q, sf


def _args(data, x_sf, pos, q, sf, token_blocks, round_sf, clamp, num_rows):
    """The launch arguments by name (kernels/quant/per_channel_cast.py)."""
    sf_t, sf_k = (x_sf.stride(0), x_sf.stride(1)) if x_sf is not None else (0, 0)
    return dict(x=data.data_ptr(), out=q.data_ptr(), sf=sf.data_ptr(), num_token_blocks=token_blocks,
                hidden_div128=data.shape[1] // 128, round_sf=int(round_sf), clamp_min=clamp,
                x_sf=x_sf.data_ptr() if x_sf is not None else 0, x_sf_stride_t=sf_t, x_sf_stride_k=sf_k,
                pos_to_token=pos.data_ptr() if pos is not None else 0, num_rows=num_rows)


# ---- v1 per_channel_cast_fused -------------------------------------------------------------
FUSED_TOKEN_BLOCKS = (128,)
FUSED_IN_BLOCKS = (128,)


def check_fused(x, fmt, num_per_tokens, round_sf, num_per_channels, pos_to_token):
    """v1 per_channel_cast_fused checks that need no GPU. Returns (data, x_sf or None, rows)."""
    data, x_sf = _check_common(x, fmt, num_per_tokens, round_sf, num_per_channels, (torch.bfloat16,),
                               FUSED_IN_BLOCKS, FUSED_TOKEN_BLOCKS)
    t, h = data.shape
    if h % 128:
        raise ValueError(f"x must have H % 128 == 0, got shape {tuple(data.shape)}")
    if not data.is_contiguous():
        raise ValueError(f"x must be contiguous (row-major), got strides {tuple(data.stride())}")
    rows = t
    if pos_to_token is not None:
        checks.tensor("pos_to_token", pos_to_token, (torch.int32,), ndim=1)
        if pos_to_token.shape[0] % 16:
            raise ValueError(f"pos_to_token length N must satisfy N % 16 == 0, got {pos_to_token.shape[0]}")
        if not pos_to_token.is_contiguous():
            raise ValueError(f"pos_to_token must be contiguous, got stride {pos_to_token.stride()}")
        rows = pos_to_token.shape[0]
    return data, x_sf, rows


def alloc_fused(rows, h, device):
    q = torch.empty((rows, h), dtype=torch.float8_e4m3fn, device=device)
    sf = torch.empty((-(-rows // 128), h), dtype=torch.float32, device=device)
    return q, sf


def per_channel_cast_fused(x, fmt, num_per_tokens, round_sf=False, num_per_channels=None, pos_to_token=None):
    """v1: per-channel (128 x 1) e4m3 quantization of x, or of its rows gathered by pos_to_token
    (-1 rows are padding: zero data, counted as zeros in their block's amax), optionally from
    FP8 1 x 128 per-token input. Returns (q [N or T, H] e4m3, sf [ceil(rows / 128), H] fp32)."""
    data, x_sf, rows = check_fused(x, fmt, num_per_tokens, round_sf, num_per_channels, pos_to_token)
    checks.cuda("x", data)
    checks.aligned("x", data, 16)
    for name, t in (("x[1] (sf)", x_sf), ("pos_to_token", pos_to_token)):
        if t is not None:
            checks.cuda(name, t)
            if t.device != data.device:
                raise ValueError(f"{name} must be on {data.device}, got {t.device}")
    q, sf = alloc_fused(rows, data.shape[1], data.device)
    if rows == 0 or data.shape[1] == 0:
        return q, sf
    if pos_to_token is not None and data.shape[0] == 0:
        raise ValueError("pos_to_token needs a non-empty x to gather from (x has 0 rows)")
    # Source rows are not range-checked on the device (one sync would cost more than the op);
    # they must be -1 or in [0, T), as get_fused_mapping produces.
    values = CONTRACT.key(in_dtype=_DTYPE_NAME[data.dtype], num_per_tokens=128, sf_kind="fp32",
                          in_block=per_channel_in_block(num_per_channels, x_sf is not None),
                          rows=per_channel_rows(fused=True, gather=pos_to_token is not None))
    clamp = config.get_amax_clamp_for_quant("e4m3", False)
    launch(CONTRACT, values, data.device,
           **_args(data, x_sf, pos_to_token, q, sf, -(-rows // 128), round_sf, clamp, rows))
    return q, sf
