"""Constants and format helpers that both the ops and the references (kernelkiln.torch) need.

The ops never import the references they are tested against: what both must agree on by definition (format
ranges, default amax floors, the E5M6 constants, UE8M0 packing, the MegaMoE scale row formula, the packed-e2m1
decoder and the lossless cast's error type) lives here, and both import it. Imports only torch.
"""
import torch

# Largest finite magnitude of each quantized format (docs/SPEC.md §2.1).
FMT_MAX = {"e4m3": 448.0, "e2m1": 6.0}

# Lower bound for a block's amax, keyed by (fmt, use_e4m3_sf). It keeps sf a positive normal float (the round_sf
# exponent trick needs that) and keeps e4m3 scales inside the e4m3 range. kernelkiln.config starts from these.
DEFAULT_CLAMP_MIN = {
    ("e4m3", False): 1e-4,
    ("e4m3", True): 448.0 * 2.0**-9,
    ("e2m1", False): 6.0 * 2.0**-126,
    ("e2m1", True): 6.0 * 2.0**-9,
}

E5M6_MAX = 65024.0  # 2**15 * (1 + 63/64)
# Default amax floor of the E5M6 cast. Like the e2m1 default (6 * 2**-126) it is fmt_max * 2**-126, the smallest
# floor that keeps sf a positive normal fp32 (round_sf's exponent trick needs that) while changing no realistic input.
E5M6_CLAMP_MIN = E5M6_MAX * 2.0**-126

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_FP32_MANTISSA_BITS = 23


class LosslessScaleError(ValueError):
    """Scales that cannot be converted exactly: a non-power-of-two input scale, or an
    exponent spread above 11 inside one output block of per_block_cast_lossless."""


def ue8m0_bytes(sf):
    """The biased exponent byte of positive power-of-two fp32 scales (int32 values 0..255)."""
    return (sf.view(torch.int32) >> _FP32_MANTISSA_BITS) & 0xFF


def pack_ue8m0_bytes(exp_bytes, dim):
    """Pack int32 bytes ``[Mb, Kb]`` four per int32 along ``dim``; byte i of word q is block 4q+i (unused bytes 0)."""
    if dim == 0:
        packed = pack_ue8m0_bytes(exp_bytes.T, 1).T
        # an empty tensor counts as contiguous whatever its strides: give it the row-major ones
        return packed.contiguous() if packed.numel() else torch.zeros(packed.shape, dtype=packed.dtype,
                                                                       device=packed.device)
    mb, kb = exp_bytes.shape
    if mb == 0 or kb == 0:  # an empty byte tensor's strides cannot be reinterpreted as int32 ones
        return torch.zeros((mb, -(-kb // 4)), dtype=torch.int32, device=exp_bytes.device)
    buf = torch.zeros((mb, -(-kb // 4) * 4), dtype=torch.uint8, device=exp_bytes.device)
    buf[:, :kb] = exp_bytes.to(torch.uint8)
    # Reinterpreting 4 bytes as one int32 is little-endian on every torch device.
    return buf.view(torch.int32)


def pack_ue8m0(sf):
    """fp32 power-of-two scales [N, K] -> int32 [N, ceil(K / 4)] words of four UE8M0 bytes along K (byte j
    of word w = the biased exponent of scale 4w + j), the packed layout of the per-token casts."""
    return pack_ue8m0_bytes(ue8m0_bytes(sf.contiguous()), 1)


def mega_moe_sf_rows(num_tokens, block_m, device=None):
    """Row of each token in a MegaMoE shared-activation scale buffer (docs/SPEC.md §3.2,
    norm_forward_and_per_token_cast): tokens in ``block_m`` chunks, each padded to a multiple of 128
    rows, each 128-row tile stored 4 x 32 transposed:
    ``row = (t // bm) * align(bm, 128) + (i // 128) * 128 + (i % 32) * 4 + (i % 128) // 32``, i = t % bm.
    Returns (int64 rows [num_tokens], rows the buffer needs)."""
    t = torch.arange(num_tokens, dtype=torch.int64, device=device)
    padded = -(-block_m // 128) * 128
    i = t % block_m
    rows = (t // block_m) * padded + (i // 128) * 128 + (i % 32) * 4 + (i % 128) // 32
    return rows, -(-num_tokens // block_m) * padded


def e2m1_table(device):
    """The 16 e2m1 values by code (sign in bit 3)."""
    magnitudes = list(E2M1_MAGNITUDES)
    return torch.tensor(magnitudes + [-m for m in magnitudes], dtype=torch.float32, device=device)


def unpack_from_e2m1fn_x2(x, out_dtype=torch.float32):
    """Decode packed e2m1 bytes ``[..., K]`` (int8 or uint8) into ``[..., 2K]`` values."""
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.int8, torch.uint8):
        raise TypeError(f'x must be an int8 or uint8 tensor of packed e2m1, got '
                        f'{getattr(x, "dtype", type(x).__name__)}')
    b = x.view(torch.uint8).to(torch.int64)
    nibbles = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)
    return e2m1_table(x.device)[nibbles].to(out_dtype)


def round_to_tf32(x):
    """fp32 -> fp32 whose upper 19 bits are ``x`` rounded to TF32, half away from zero: the bits plus 0x1000 (half of
    the 13 bits a TF32 tensor core ignores), exactly as tile_kernels 1.0's ``round_to_tf32`` (the low 13 bits are
    left as the addition gives them; the tensor cores never read them). Callers of the mhc pre-norm projection ops
    round fn and out_mul_grad with it. Like the peer's it wraps the int32 addition (a NaN whose mantissa is all ones
    becomes a negative tiny number) and carries values within half a TF32 ulp of the fp32 maximum into the NaN range."""
    return (x.view(torch.int32) + 0x1000).view(torch.float32)
