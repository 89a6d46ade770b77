"""Quantization test helpers (the peer's ``tile_kernels.testing.quant``)."""
import torch

from kernelkiln.utils import align, ceil_div

_UE8M0_PER_WORD = 4  # packed UE8M0: four one-byte scales per int32


def _bytes(sf):
    flat = sf.contiguous().flatten()
    return flat.as_strided(flat.shape, (1,)).view(torch.uint8)


def quant_level_rank(xc, fmt):
    """Rank of each bf16 / e4m3 / packed e2m1 code among its format's values, in value order: two codes are adjacent
    values exactly when their ranks differ by at most 1, across zero and exponent boundaries (raw bit differences
    are not). Returns a flat int32 tensor (two ranks per packed e2m1 byte, low nibble first)."""
    if fmt == "bf16":
        bits, top = xc.view(torch.int16).to(torch.int32), 0x7F7F  # 0x7F7F: the largest finite bf16
        magnitude = bits & 0x7FFF
        negative = bits < 0
    elif fmt == "e4m3":
        bits, top = xc.view(torch.int8).to(torch.int32), 0x7E  # 0x7E: the largest finite e4m3fn
        magnitude = bits & 0x7F
        negative = bits < 0
    else:  # packed e2m1, sign in bit 3 of each nibble
        nibbles = torch.stack([(xc & 0x0F).to(torch.int32), ((xc >> 4) & 0x0F).to(torch.int32)], dim=-1)
        top, magnitude, negative = 0x7, nibbles & 0x7, (nibbles & 0x8) != 0
    return (top + torch.where(negative, -magnitude, magnitude)).flatten()


def clear_unused_sf(sf, hidden, num_per_channels):
    """Packed UE8M0 scales [T, ceil(ceil(hidden / g) / 4)] as bytes [T, 4 * words], with the bytes past the
    ceil(hidden / g) real scales of each row set to zero (in place where sf is dense); returns that uint8 view."""
    blocks = ceil_div(hidden, num_per_channels)
    rows = _bytes(sf).view(-1, align(blocks, _UE8M0_PER_WORD))
    rows[:, blocks:] = 0
    return rows


def clear_unused_sf_col_pack(sf, num_tokens, num_per_tokens):
    """Scales packed four token blocks per int32 along M ((gm, 1) blocks): the bytes of the token blocks past
    ceil(num_tokens / gm) set to zero; returns the uint8 view [words along M, columns * 4]."""
    blocks = ceil_div(num_tokens, num_per_tokens)
    padded = align(blocks, _UE8M0_PER_WORD)
    if sf.numel() == 0:
        return sf.view(torch.uint8)
    raw = _bytes(sf)
    words = raw.view(padded // _UE8M0_PER_WORD, -1, _UE8M0_PER_WORD)
    words[blocks // _UE8M0_PER_WORD:, :, blocks % _UE8M0_PER_WORD:] = 0
    return raw.view(padded // _UE8M0_PER_WORD, -1)
