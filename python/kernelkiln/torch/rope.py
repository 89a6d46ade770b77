"""References of ``transform.apply_rotary`` (rotary position embedding).

``rotary_embedding_ref`` is the peer's reference: separate cos and sin [seqlen_ro, D/2], a new tensor returned,
unfused fp32 arithmetic (a*cos - b*sin with its own roundings) and a cast to x's dtype; channels past the rotary dim
pass through. ``apply_rotary_ref`` is the kernel's exact numerics, the fma form of docs/SPEC.md §3.10 with the
kernel's arguments (one [seqlen_ro, D] cache; the rotated tensors are returned, where the kernel works in place):
a' = fma(a, cos, -(b*s)), b' = fma(a, s, b*cos), s = -sin for the conjugate rotation, one rounding to the dtype.
Positions are int32 on the device: int64 positions are truncated (two's complement) before the offset is added,
with int32 wrap-around.
"""
import torch

from .fused import fma_f32

__all__ = ["apply_rotary_ref", "rotary_embedding_ref"]


def _rows(x, positions, seqlen_offset):
    """int64 cache row of every token of x [B, S, ...] (3-D x: [S, ...] with B = 1)."""
    b, s = (1, x.shape[0]) if x.dim() == 3 else x.shape[:2]
    if positions is None:
        pos = torch.arange(s, dtype=torch.int64, device=x.device).expand(b, s)
    else:
        pos = positions.reshape(b, s) if positions.dim() == 1 else positions
        pos = pos.to(torch.int64)
    pos = ((pos + 2**31) % 2**32) - 2**31  # the int32 truncation of the kernel
    pos = pos + int(seqlen_offset)
    return ((pos + 2**31) % 2**32) - 2**31  # int32 addition


def _pairs(x, rot, interleaved):
    if interleaved:
        return x[..., 0:rot:2], x[..., 1:rot:2]
    return x[..., : rot // 2], x[..., rot // 2: rot]


def _unpairs(a, b, interleaved):
    if interleaved:
        return torch.stack((a, b), dim=-1).flatten(-2)
    return torch.cat((a, b), dim=-1)


def _select(table, rows, x):
    """table[rows] shaped to broadcast against x's pairs [B, S, heads, D/2] (or [S, heads, D/2])."""
    t = table[rows]  # [B, S, D/2]
    t = t[:, :, None, :]
    return t[0] if x.dim() == 3 else t


def rotary_embedding_ref(x, cos, sin, positions=None, seqlen_offsets=0, interleaved=False, conjugate=False):
    """The peer's reference: rotate the first 2 * cos.shape[1] channels of x [T, heads, D'] or [B, S, heads, D']
    by cos/sin [seqlen_ro, D/2] rows ``positions + seqlen_offsets`` (or the token index + seqlen_offsets), unfused
    fp32 arithmetic, cast to x's dtype; the other channels pass through. Returns a new tensor."""
    rot = 2 * cos.shape[1]
    rows = _rows(x, positions, seqlen_offsets)
    c, s = _select(cos.float(), rows, x), _select(sin.float(), rows, x)
    if conjugate:
        s = -s
    a, b = _pairs(x.float(), rot, interleaved)
    ra = a * c - b * s
    rb = a * s + b * c
    # Rounded to x's dtype by writing into the pair slices of a copy, as the peer does: a strided (interleaved)
    # write converts NaN to the canonical NaN, a contiguous one keeps its sign, so NaN bits match only this way.
    out = x.clone()
    ra_slot, rb_slot = _pairs(out, rot, interleaved)
    ra_slot.copy_(ra)
    rb_slot.copy_(rb)
    return out


def apply_rotary_ref(query, cos_sin_cache, key=None, positions=None, interleaved=False, conjugate=False,
                     seqlen_offset=0):
    """The kernel's numerics with apply_rotary's arguments: returns the rotated (query, key or None) as new tensors
    (the kernel rotates in place). cos_sin_cache [seqlen_ro, D] fp32: cos in [:, :D/2], sin in [:, D/2:]."""
    d = cos_sin_cache.shape[1]
    cos, sin = cos_sin_cache[:, : d // 2].float(), cos_sin_cache[:, d // 2:].float()

    def rotate(x):
        rows = _rows(x, positions, seqlen_offset)
        c, s = _select(cos, rows, x), _select(sin, rows, x)
        if conjugate:
            s = -s
        a, b = _pairs(x.float(), d, interleaved)
        c, s = torch.broadcast_to(c, a.shape), torch.broadcast_to(s, a.shape)
        ra = fma_f32(a, c, -(b * s))  # b * s: one fp32 product (as __fmul_rn), negated exactly
        rb = fma_f32(a, s, b * c)
        return _unpairs(ra, rb, interleaved).to(x.dtype)

    return rotate(query), (rotate(key) if key is not None else None)
