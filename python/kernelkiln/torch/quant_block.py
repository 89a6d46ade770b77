"""References for the per_block_cast family, dequantization and fake quantization.

Thin compositions of the bit-exact oracles in ``kernelkiln.torch.quant`` (which
already handle 2-D blocks, UE8M0 packing along K or M and every sf layout).
"""

import torch

from .quant import cast, cast_back

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "per_block_cast_ref",
    "per_token_cast_and_cast_back_ref",
    "per_token_cast_back_ref",
]


def per_block_cast_ref(x, fmt, block_size, **kwargs):
    """``cast`` with one scale per ``block_size = (gm, g)`` block (2-D blocks, e.g. 128x128)."""
    return cast(x, fmt, block_size, **kwargs)


def per_token_cast_back_ref(x, fmt, num_per_channels):
    """``cast_back`` with block (1, num_per_channels)."""
    return cast_back(x, fmt, (1, num_per_channels))


def per_token_cast_and_cast_back_ref(x, fmt, num_per_channels, round_sf=False, use_e4m3_sf=False):
    """In-place fake quantization of x [T, H] (bf16/fp32): x <- cast_back(cast(x, fmt, (1, g))). Returns None."""
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f'x must be a bf16 or fp32 torch.Tensor, got {getattr(x, "dtype", type(x).__name__)}')
    block = (1, num_per_channels)
    q = cast(x, fmt, block, round_sf=round_sf, use_e4m3_sf=use_e4m3_sf)
    x.copy_(cast_back(q, 'bf16' if x.dtype == torch.bfloat16 else 'fp32', block))
