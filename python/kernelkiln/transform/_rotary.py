"""apply_rotary (tile_kernels 2.1 ``transform.apply_rotary``): rotary position embedding in place on query and key.

query [T, heads, D] or [B, S, heads, D] (bf16 or fp32, inner stride 1), key the same rank and dtype with its own
head count, cos_sin_cache [seqlen_ro, D] fp32 (cos in [:, :D/2], sin in [:, D/2:]), positions int32/int64 [T] or
[B, S] (inner stride 1; a batch stride of 0 broadcasts one row). Numerics: docs/SPEC.md §3.10 and
``kernelkiln.torch.rope`` (the fma form, one rounding to the dtype). Without positions the row of a token is
``seqlen_offset + s`` and is checked against the cache here; given positions are read on the device and, as in the
peer, not checked (a position outside the cache reads outside it).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.transform import APPLY_ROTARY as CONTRACT
from kernelkiln_contract.transform import ROTARY_HEAD_DIMS, ROTARY_VEC, rotary_tokens_per_cta

OP = CONTRACT.op
_DTYPES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
_POS_DTYPES = {torch.int32: "int32", torch.int64: "int64"}
_INT32_MAX = 2**31 - 1


def _check_int(name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be a Python int, got {type(v).__name__}")


def _as_4d(name, t, dtype=None):
    checks.tensor(name, t, tuple(_DTYPES) if dtype is None else (dtype,))
    if t.dim() not in (3, 4):
        raise ValueError(f"{name} must be [T, heads, D] or [B, S, heads, D], got shape {tuple(t.shape)}")
    return t.unsqueeze(0) if t.dim() == 3 else t


def _check_layout(name, x4, d):
    if x4.shape[-1] != d:
        raise ValueError(f"{name}.shape[-1] must equal the cache's head dim {d}, got {x4.shape[-1]}")
    if x4.stride(-1) != 1:
        raise ValueError(f"{name} must have inner stride 1, got strides {tuple(x4.stride())}")
    b, s, h, _ = x4.shape
    for dim, what in ((0, "batch"), (1, "sequence"), (2, "head")):
        if x4.shape[dim] > 1 and x4.stride(dim) % ROTARY_VEC:
            raise ValueError(f"{name}'s {what} stride must be a multiple of {ROTARY_VEC} elements (the kernel's "
                             f"vector loads), got strides {tuple(x4.stride())}")


def check(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset, device=True):
    """Validated (query 4-D, key 4-D or None, positions 2-D or None, head dim); raises naming the argument.
    ``device=False`` (the fake implementation) skips what fake tensors cannot answer: addresses and the device."""
    q4 = _as_4d("query", query)
    checks.tensor("cos_sin_cache", cos_sin_cache, (torch.float32,), ndim=2)
    d = cos_sin_cache.shape[1]
    if d not in ROTARY_HEAD_DIMS:
        raise ValueError(f"cos_sin_cache.shape[1] (the rotary head dim) must be one of {list(ROTARY_HEAD_DIMS)}, got {d}")
    if cos_sin_cache.stride(1) != 1 or (cos_sin_cache.shape[0] > 1 and cos_sin_cache.stride(0) % ROTARY_VEC):
        raise ValueError(f"cos_sin_cache must have inner stride 1 and a row stride that is a multiple of {ROTARY_VEC}, "
                         f"got strides {tuple(cos_sin_cache.stride())}")
    _check_layout("query", q4, d)
    k4 = None
    if key is not None:
        k4 = _as_4d("key", key, query.dtype)
        if key.dim() != query.dim() or k4.shape[:2] != q4.shape[:2]:
            raise ValueError(f"key must have query's rank and leading sizes {tuple(q4.shape[:2])}, got shape "
                             f"{tuple(key.shape)}")
        _check_layout("key", k4, d)
        checks.same_device("key", key, "query", query)
    checks.flag("interleaved", interleaved)
    checks.flag("conjugate", conjugate)
    _check_int("seqlen_offset", seqlen_offset)
    p2 = None
    b, s = q4.shape[:2]
    if positions is not None:
        checks.tensor("positions", positions, tuple(_POS_DTYPES))
        want = (s,) if query.dim() == 3 else (b, s)
        if tuple(positions.shape) != want:
            raise ValueError(f"positions must have shape {want} for query of shape {tuple(query.shape)}, got "
                             f"{tuple(positions.shape)}")
        if positions.stride(-1) != 1 and s > 1:
            raise ValueError(f"positions must have inner stride 1, got strides {tuple(positions.stride())}")
        p2 = positions.unsqueeze(0) if positions.dim() == 1 else positions
        checks.same_device("positions", positions, "query", query)
    elif s and not (0 <= seqlen_offset and seqlen_offset + s <= cos_sin_cache.shape[0]):
        raise ValueError(f"without positions the tokens use cache rows seqlen_offset .. seqlen_offset + S - 1 = "
                         f"{seqlen_offset} .. {seqlen_offset + s - 1}, outside the cache's {cos_sin_cache.shape[0]} rows")
    if not -_INT32_MAX <= seqlen_offset <= _INT32_MAX:
        raise ValueError(f"seqlen_offset must fit in int32 (positions are int32 on the device), got {seqlen_offset}")
    checks.same_device("cos_sin_cache", cos_sin_cache, "query", query)
    if device:
        checks.aligned("cos_sin_cache", cos_sin_cache, 16)
        for name, t in (("query", q4), ("key", k4)):
            if t is not None:
                checks.aligned(name, t, ROTARY_VEC * t.element_size())
        checks.cuda("query", query)
    return q4, k4, p2, d


def _rotate(x4, cache, p2, d, interleaved, conjugate, seqlen_offset):
    b, s, h, _ = x4.shape
    if x4.numel() == 0:
        return
    values = CONTRACT.key(dtype=_DTYPES[x4.dtype], head_dim=d, interleaved=interleaved,
                          positions_dtype=_POS_DTYPES[p2.dtype] if p2 is not None else "int32")
    launch(CONTRACT, values, x4.device,
           x=x4.data_ptr(), cos_sin=cache.data_ptr(), positions=p2.data_ptr() if p2 is not None else 0,
           batch=b, seqlen=s, heads=h, x_stride_b=x4.stride(0) // ROTARY_VEC if b > 1 else 0,
           x_stride_s=x4.stride(1) // ROTARY_VEC, x_stride_h=x4.stride(2) // ROTARY_VEC,
           cache_stride=cache.stride(0) // ROTARY_VEC if cache.shape[0] > 1 else d // ROTARY_VEC,
           positions_stride_b=p2.stride(0) if p2 is not None and b > 1 else 0,
           has_positions=int(p2 is not None), seqlen_offset=seqlen_offset, sin_sign=-1.0 if conjugate else 1.0,
           tokens_per_cta=rotary_tokens_per_cta(h, d))


def apply_rotary(query, cos_sin_cache, key=None, positions=None, interleaved=False, conjugate=False, seqlen_offset=0):
    """Rotate query (and key) in place; returns None."""
    q4, k4, p2, d = check(query, cos_sin_cache, key, positions, interleaved, conjugate, seqlen_offset)
    _rotate(q4, cos_sin_cache, p2, d, interleaved, conjugate, seqlen_offset)
    if k4 is not None:
        _rotate(k4, cos_sin_cache, p2, d, interleaved, conjugate, seqlen_offset)
