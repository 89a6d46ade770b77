"""batched_transpose_weight_sf (tile_kernels 2.1 signature): one pointer-table launch for all weights.

Layouts are those of ``kernelkiln.torch.quant_lossless.batched_transpose_weight_sf`` (the
reference). Fresh outputs are views of one pooled int32 buffer, each starting 32-byte aligned;
given ``outs[w]`` are checked (dtype, shape, exact strides, 32-byte alignment, device) and
rewritten in place. Non-power-of-two scales raise ``LosslessScaleError`` through the
host-mapped error word of ``_lossless`` (at the next call or ``kernelkiln.quant.check_errors()``).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln.quant import _lossless
from kernelkiln_contract.quant import TRANSPOSE_WEIGHT_SF as CONTRACT

OP = CONTRACT.op
BLOCK_SIZES = (32, 128)
ROWS_PER_TASK = 16  # kernels/quant/transpose_weight_sf.py
ALIGN_WORDS = 8  # 32 bytes


def _layouts(shape3, bs, transpose_sf1, batched):
    """((shape, stride) of sf0, (shape, stride) of sf1, words of each) for [G, nb, kb] scales."""
    g, nb, kb = shape3
    n, k = nb * bs, kb * bs
    k4, n4 = -(-kb // 4), -(-nb // 4)
    s0 = ((g, n, k4), (n * k4, 1, n))
    s1 = ((g, n4, k), (n4 * k, k, 1)) if transpose_sf1 else ((g, k, n4), (k * n4, 1, k))
    if not batched:
        s0, s1 = (s0[0][1:], s0[1][1:]), (s1[0][1:], s1[1][1:])
    return s0, s1, g * n * k4, g * k * n4


def _check_out(name, t, layout, ref):
    shape, stride = layout
    checks.tensor(name, t, (torch.int32,))
    checks.same_device(name, t, "sf[0]", ref)
    if tuple(t.shape) != shape or tuple(t.stride()) != stride:
        raise ValueError(f"{name} must be an int32 tensor of shape {shape} and strides {stride}; got shape "
                         f"{tuple(t.shape)}, strides {tuple(t.stride())}")
    checks.aligned(name, t, 32)


def _check(sf, block_size, transpose_sf1s, outs):
    if isinstance(sf, torch.Tensor) or not hasattr(sf, "__len__"):
        raise TypeError("sf must be a sequence (list/tuple) of tensors, one per weight")
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, got {block_size!r}")
    checks.choice("block_size", block_size, BLOCK_SIZES)
    w = len(sf)
    if not hasattr(transpose_sf1s, "__len__") or len(transpose_sf1s) != w:
        raise ValueError(f"transpose_sf1s must be a sequence of {w} bools (one per weight)")
    if outs is None or not hasattr(outs, "__len__") or len(outs) != w:
        raise ValueError(f"outs must be a sequence of {w} entries (None or an (sf0, sf1) pair), one per weight")
    plans = []
    for i, s in enumerate(sf):
        checks.tensor(f"sf[{i}]", s, (torch.float32,))
        checks.flag(f"transpose_sf1s[{i}]", transpose_sf1s[i])
        if s.dim() not in (2, 3):
            raise ValueError(f"sf[{i}] must be [n/bs, k/bs] or [G, n/bs, k/bs], got shape {tuple(s.shape)}")
        if not s.is_contiguous():
            raise ValueError(f"sf[{i}] must be contiguous, got strides {tuple(s.stride())}")
        shape3 = tuple(s.shape) if s.dim() == 3 else (1,) + tuple(s.shape)
        n, k = shape3[1] * block_size, shape3[2] * block_size
        if n % 128 or k % 128 or n == 0 or k == 0:
            raise ValueError(f"sf[{i}] of shape {tuple(s.shape)} with block_size {block_size} describes a weight "
                             f"[n, k] = [{n}, {k}]; n and k must be positive multiples of 128")
        if i:
            checks.same_device(f"sf[{i}]", s, "sf[0]", sf[0])
        l0, l1, w0, w1 = _layouts(shape3, block_size, transpose_sf1s[i], s.dim() == 3)
        o = outs[i]
        if o is not None:
            if not (isinstance(o, (tuple, list)) and len(o) == 2):
                raise TypeError(f"outs[{i}] must be None or an (sf0, sf1) pair of int32 tensors")
            _check_out(f"outs[{i}][0]", o[0], l0, sf[0])
            _check_out(f"outs[{i}][1]", o[1], l1, sf[0])
        plans.append((shape3, n, k, l0, l1, w0, w1))
    return plans


# Device copies of pointer tables, keyed on their content. Offsets are relative to the lowest input
# and output address, so repeated calls on the same weights hit even with fresh output pools: no
# copy at all. The pinned host side is kept alive with it, so a copy captured in a CUDA graph keeps
# a valid source. Entries are only evicted outside graph capture.
_tables = {}
_MAX_TABLES = 256


def _table(rows, device):
    key = (device.index, tuple(tuple(r) for r in rows))
    hit = _tables.get(key)
    if hit is None:
        if len(_tables) >= _MAX_TABLES and not torch.cuda.is_current_stream_capturing():
            _tables.clear()
        host = torch.tensor(rows, dtype=torch.int64).pin_memory()
        hit = (host, host.to(device, non_blocking=True))
        _tables[key] = hit
    return hit[1]


def batched_transpose_weight_sf(sf, block_size, transpose_sf1s, outs):
    """Per-weight fp32 power-of-two block scales -> ``[(sf0, sf1), ...]`` packed UE8M0 int32.

    Same signature, layouts and results as tile_kernels 2.1 ``quant.batched_transpose_weight_sf``.
    """
    plans = _check(sf, block_size, transpose_sf1s, outs)
    if not plans:
        return []
    device = sf[0].device
    checks.cuda("sf[0]", sf[0])
    _lossless.raise_pending(device.index)
    pool_words = sum(-(-p[5] // ALIGN_WORDS) * ALIGN_WORDS + -(-p[6] // ALIGN_WORDS) * ALIGN_WORDS
                     for i, p in enumerate(plans) if outs[i] is None)
    pool = torch.empty(pool_words, dtype=torch.int32, device=device) if pool_words else None
    results, off = [], 0
    for i, (shape3, n, k, l0, l1, w0, w1) in enumerate(plans):
        if outs[i] is not None:
            results.append(tuple(outs[i]))
            continue
        o0 = pool.as_strided(l0[0], l0[1], off)
        off += -(-w0 // ALIGN_WORDS) * ALIGN_WORDS
        o1 = pool.as_strided(l1[0], l1[1], off)
        off += -(-w1 // ALIGN_WORDS) * ALIGN_WORDS
        results.append((o0, o1))
    rows, task = [], 0
    live = [(i, p) for i, p in enumerate(plans) if p[0][0] > 0]
    if not live:
        return results
    in_base = min(sf[i].data_ptr() for i, _ in live)
    out_base = min(min(results[i][0].data_ptr(), results[i][1].data_ptr()) for i, _ in live)
    for i, (shape3, n, k, l0, l1, w0, w1) in live:
        t0, t1 = w0 // ROWS_PER_TASK, w1 // ROWS_PER_TASK  # a task = 16 rows of one column (n, k % 128 == 0)
        rows.append([task, task + t0, (sf[i].data_ptr() - in_base) // 4, (results[i][0].data_ptr() - out_base) // 16,
                     (results[i][1].data_ptr() - out_base) // 16, n, k, 0])
        task += t0 + t1
    if task >= 2**31:
        raise ValueError(f"batched_transpose_weight_sf: {task} tasks exceed the int32 task index; split the call")
    table = _table(rows, device)
    err = _lossless.flag(device.index)[0]
    launch(CONTRACT, CONTRACT.key(sf_dtype="float32"), device, inp=in_base, out=out_base, table=table.data_ptr(),
           err=err.data_ptr(), num_weights=len(rows), num_tasks=task, lg_bs=block_size.bit_length() - 1)
    _lossless.after_launch(device.index)
    return results
