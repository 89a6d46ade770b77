"""References for the exact scale-format conversions (docs/SPEC.md §3.2, §2.1).

* ``per_block_cast_lossless_ref``: MXFP4 (e2m1 data + power-of-two scales over x_block_size)
  -> e4m3 with one power-of-two scale per coarser out block. Scales are handled as biased
  exponent bytes e (fp32 bits >> 23, or the UE8M0 byte). An out block's exponent is
  E = max(0, max(e) - 6); each value is multiplied by 2^(e - E), which is exact in e4m3 as long
  as e - E >= -5 (the peer device-asserts exponent spread <= 11; here it is ``LosslessScaleError``).
  The returned scale is 2^(E - 127) as fp32 (bits E << 23, so E = 0 reads 0.0) or the UE8M0
  byte E. round_sf does not change anything (the scale is a power of two either way);
  use_packed_ue8m0 requires it, as everywhere else.
* ``batched_transpose_weight_sf``: per-weight fp32 power-of-two block scales -> the two packed
  UE8M0 layouts a GEMM needs for W and W^T (see the function).

Imports only torch.
"""
import torch

from kernelkiln._formats import LosslessScaleError  # noqa: F401  (shared with the ops)

from kernelkiln._formats import e2m1_table as _e2m1_table

from .quant import _check_scale_flags, _pack_ue8m0, _to_e4m3, _to_tma_col_major, _unpack_ue8m0

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "LosslessScaleError",
    "batched_transpose_weight_sf",
    "per_block_cast_lossless_ref",
]

MAX_SHIFT = 6  # e2m1 max 6 * 2^6 = 384 <= 448
MAX_SPREAD = 11  # e - E >= -5 keeps 0.5 * 2^(e - E) an e4m3 normal
_POW2_MASK = 0x807FFFFF  # sign and mantissa bits: zero for +0.0 and every positive power of two




def _pair(name, v):
    if not (isinstance(v, (tuple, list)) and len(v) == 2 and
            all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in v)):
        raise TypeError(f"{name} must be a pair of positive ints (rows, cols), got {v!r}")
    return int(v[0]), int(v[1])


def _pow2_bytes(sf, name):
    """Biased exponent bytes of fp32 scales; LosslessScaleError unless each is +0.0 or 2^k."""
    bits = sf.contiguous().view(torch.int32)
    bad = (bits & _POW2_MASK) != 0
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise LosslessScaleError(f"{name}{list(idx)} = {float(sf[idx])!r} is not a non-negative power of two; "
                                 "only power-of-two scales convert exactly")
    return (bits >> 23) & 0xFF


def _in_exponents(sf, t, h, block):
    """Input exponent bytes [ceil(T/gm), H/gk] (int32) of fp32 or packed-UE8M0 scales, any layout."""
    mb, kb = -(-t // block[0]), h // block[1]
    if not isinstance(sf, torch.Tensor) or sf.dim() != 2:
        raise TypeError("x[1] (sf) must be a 2-D tensor")
    if sf.dtype == torch.int32:
        shape = (mb, -(-kb // 4))
        if tuple(sf.shape) != shape:
            raise ValueError(f"x[1] (packed UE8M0 sf) must have shape {shape}, got {tuple(sf.shape)}")
        # a fresh row-major copy: quant._unpack_ue8m0 cannot view a size-1 tensor with odd strides as bytes
        return _unpack_ue8m0(sf.new_empty(sf.shape).copy_(sf), (mb, kb), 1).to(torch.int32)
    if sf.dtype != torch.float32:
        raise TypeError(f"x[1] (sf) must be torch.float32 or packed UE8M0 torch.int32, got {sf.dtype}")
    if tuple(sf.shape) != (mb, kb):
        raise ValueError(f"x[1] (sf) must have shape {(mb, kb)}, got {tuple(sf.shape)}")
    return _pow2_bytes(sf, "x[1] (sf)")


def per_block_cast_lossless_ref(x, fmt, x_block_size, out_block_size, use_tma_aligned_col_major_sf=False,
                                round_sf=False, use_packed_ue8m0=False):
    """Reference of ``quant.per_block_cast_lossless``; returns ``(q [T, H] e4m3, sf)``."""
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError("x must be a (data, sf) pair: e2m1 int8 [T, H/2] and power-of-two scales")
    if fmt != "e4m3":
        raise ValueError(f"fmt must be 'e4m3' (the lossless target of e2m1), got {fmt!r}")
    bi, bo = _pair("x_block_size", x_block_size), _pair("out_block_size", out_block_size)
    if bo[0] % bi[0] or bo[1] % bi[1]:
        raise ValueError(f"out_block_size {bo} must be a multiple of x_block_size {bi}")
    _check_scale_flags(round_sf, use_packed_ue8m0, False)
    data, sf = x
    if not isinstance(data, torch.Tensor) or data.dtype != torch.int8 or data.dim() != 2:
        raise TypeError("x[0] (data) must be a 2-D torch.int8 tensor of packed e2m1")
    t, h = data.shape[0], data.shape[1] * 2
    if h % bo[1]:
        raise ValueError(f"hidden {h} must be a multiple of out_block_size[1] = {bo[1]}")
    e_in = _in_exponents(sf, t, h, bi)
    # per element exponent, then the out block maximum over existing rows (padding rows are 0)
    e_el = e_in.repeat_interleave(bi[0], 0)[:t].repeat_interleave(bi[1], 1)
    mb, kb = -(-t // bo[0]), h // bo[1]
    padded = e_el.new_zeros((mb * bo[0], h))
    padded[:t] = e_el
    e_blk = padded.reshape(mb, bo[0], kb, bo[1]).amax(dim=(1, 3)) if t else padded.new_zeros((0, kb))
    e_out = torch.clamp(e_blk - MAX_SHIFT, min=0)
    d = e_el - e_out.repeat_interleave(bo[0], 0)[:t].repeat_interleave(bo[1], 1)
    if t and bool((d < MAX_SHIFT - MAX_SPREAD).any()):
        r, c = (int(i) for i in (d < MAX_SHIFT - MAX_SPREAD).nonzero()[0])
        raise LosslessScaleError(
            f"per_block_cast_lossless: the scale exponent of row {r}, channel {c} is "
            f"{int(e_out[r // bo[0], c // bo[1]] + MAX_SHIFT - e_el[r, c])} below the maximum of its "
            f"{bo} output block; at most {MAX_SPREAD} converts exactly to e4m3")
    values = _e2m1_table(data.device)[_nibbles(data)]
    q = _to_e4m3(values * ((d + 127) << 23).view(torch.float32))  # exact: a power-of-two product
    if use_packed_ue8m0:
        sf_out = _pack_ue8m0(e_out, 1)
    else:
        sf_out = (e_out << 23).view(torch.float32)
    if use_tma_aligned_col_major_sf:
        sf_out = _to_tma_col_major(sf_out)
    return q, sf_out


def _nibbles(data):
    b = data.view(torch.uint8).to(torch.int64)
    return torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)


def batched_transpose_weight_sf(sf, block_size, transpose_sf1s, outs=None):
    """Per-weight fp32 power-of-two block scales -> ``[(sf0, sf1), ...]`` packed UE8M0 int32.

    sf[w]: contiguous fp32 ``[n/bs, k/bs]`` or ``[G, n/bs, k/bs]`` (n, k multiples of 128).
    sf0 ``[G?, n, ceil(k/bs/4)]`` strides ``(n*K4, 1, n)``: row r holds the scales of block row
    r // bs, four consecutive k-blocks per int32 (byte i = block 4q + i).
    sf1 ``[G?, k, ceil(n/bs/4)]`` strides ``(k*N4, 1, k)``: row c holds block column c // bs,
    packed along n; with transpose_sf1s[w] the same storage is returned as the row-major
    ``[G?, ceil(n/bs/4), k]``. Unused pad bytes are 0. outs[w] = (sf0, sf1) given: written in place (``outs`` is
    ours: the peer's reference takes none).
    """
    results = []
    for w, s in enumerate(sf):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32 or s.dim() not in (2, 3):
            raise TypeError(f"sf[{w}] must be a 2-D or 3-D torch.float32 tensor")
        s3 = s if s.dim() == 3 else s.unsqueeze(0)
        g, nb, kb = s3.shape
        n, k = nb * block_size, kb * block_size
        e = _pow2_bytes(s3, f"sf[{w}]")
        rows = e.repeat_interleave(block_size, 1)  # [G, n, kb]
        sf0 = torch.stack([_pack_ue8m0(rows[i], 1) for i in range(g)]) if g else rows.new_zeros((0, n, -(-kb // 4)))
        cols = e.transpose(1, 2).repeat_interleave(block_size, 1)  # [G, k, nb]
        sf1 = torch.stack([_pack_ue8m0(cols[i], 1) for i in range(g)]) if g else cols.new_zeros((0, k, -(-nb // 4)))
        k4, n4 = sf0.shape[2], sf1.shape[2]
        # exact strides even for size-1 dims (MN-major: rows contiguous, one column after another)
        sf0 = torch.empty_strided((g, n, k4), (n * k4, 1, n), dtype=torch.int32, device=s.device).copy_(sf0)
        if transpose_sf1s[w]:
            sf1 = torch.empty_strided((g, n4, k), (n4 * k, k, 1), dtype=torch.int32,
                                      device=s.device).copy_(sf1.transpose(1, 2))
        else:
            sf1 = torch.empty_strided((g, k, n4), (k * n4, 1, k), dtype=torch.int32, device=s.device).copy_(sf1)
        if s.dim() == 2:
            sf0, sf1 = sf0[0], sf1[0]
        if outs is not None and outs[w] is not None:
            outs[w][0].copy_(sf0)
            outs[w][1].copy_(sf1)
            sf0, sf1 = outs[w]
        results.append((sf0, sf1))
    return results
