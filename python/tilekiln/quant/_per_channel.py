"""per_channel_cast (tile_kernels 2.1 signature): per-column FP8 scaling over gm-token blocks.

x [T, H] bf16/fp32 row-major, fmt 'e4m3', gm = num_per_tokens in {32, 128}, T % 128 == 0,
H % 128 == 0 -> (q [T, H] e4m3 row-major, sf [T/gm, H] fp32) or, with use_packed_ue8m0,
sf int32 [ceil(T/gm/4), H] ("col pack": byte i of word [r, c] is token block 4r+i).
Reference: ``tilekiln.torch.cast(x, 'e4m3', (gm, 1), round_sf=..., use_packed_ue8m0=...)``.
"""
import torch

from tilekiln import config
from tilekiln._runtime import checks, launch

OP = "per_channel_cast"
PARAM_NAMES = ("in_dtype", "num_per_tokens", "sf_kind")
FORMATS = ("e4m3",)
TOKEN_BLOCKS = (32, 128)
_IN = {torch.bfloat16: "bfloat16", torch.float32: "float32"}


def check_args(x, fmt, num_per_tokens, round_sf, num_per_channels, use_packed_ue8m0):
    """Every check that needs no GPU (shared by the op and its fake)."""
    if isinstance(x, (tuple, list)):
        raise NotImplementedError("per_channel_cast of pre-quantized (e4m3, sf) input is not built into this "
                                  "TileKiln release; pass bf16/fp32 x (dequantize with quant.cast_back first)")
    if num_per_channels is not None:
        raise ValueError(f"num_per_channels describes a pre-quantized input's scale blocks and must be None for "
                         f"bf16/fp32 x, got {num_per_channels!r}")
    checks.tensor("x", x, tuple(_IN), ndim=2)
    checks.choice("fmt", fmt, FORMATS)
    if isinstance(num_per_tokens, bool) or not isinstance(num_per_tokens, int):
        raise TypeError(f"num_per_tokens must be an int, got {type(num_per_tokens).__name__}")
    checks.choice("num_per_tokens", num_per_tokens, TOKEN_BLOCKS)
    checks.flag("round_sf", round_sf)
    checks.flag("use_packed_ue8m0", use_packed_ue8m0)
    if use_packed_ue8m0 and not round_sf:
        raise ValueError("use_packed_ue8m0=True requires round_sf=True (UE8M0 holds powers of two only)")
    t, h = x.shape
    if t % 128 or h % 128:
        raise ValueError(f"x must have T % 128 == 0 and H % 128 == 0, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous (row-major), got strides {tuple(x.stride())}")


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
    check_args(x, fmt, num_per_tokens, round_sf, num_per_channels, use_packed_ue8m0)
    checks.cuda("x", x)
    checks.aligned("x", x, 16)
    q, sf = alloc(x, num_per_tokens, use_packed_ue8m0)
    t, h = x.shape
    if t == 0:
        return q, sf
    values = (_IN[x.dtype], num_per_tokens, "ue8m0" if use_packed_ue8m0 else "fp32")
    clamp = config.get_amax_clamp_for_quant("e4m3", False)
    launch(OP, PARAM_NAMES, values, x.device,
           (x.data_ptr(), q.data_ptr(), sf.data_ptr(), t // num_per_tokens, h // 128, int(round_sf), clamp))
    return q, sf
