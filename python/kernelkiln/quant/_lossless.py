"""per_block_cast_lossless (tile_kernels 2.1 signature) and the scale-error channel of the
exact scale conversions (this op and batched_transpose_weight_sf).

The peer device-asserts when a conversion would not be exact, which kills the CUDA context.
Our kernels instead record (code, where) in a per-device word of host-mapped pinned memory.
Reading it needs no synchronization, so ``LosslessScaleError`` is raised by the next call of
either op on that device, or at once by ``kernelkiln.quant.check_errors()`` (which synchronizes),
or right after the launch with ``KERNELKILN_SYNC_CHECKS=1`` / ``kernelkiln.moe.set_sync_checks(True)``.
The outputs of the offending blocks are unspecified.
"""

import torch

from kernelkiln import config
from kernelkiln._ops import checks, error_flags
from kernelkiln._ops.launch import launch
from kernelkiln.quant._per_token import _sf_storage
from kernelkiln._formats import LosslessScaleError
from kernelkiln_contract.quant import PER_BLOCK_CAST_LOSSLESS as CONTRACT

OP = CONTRACT.op
SF_FP32, SF_UE8M0 = 0, 1  # kernels/quant/per_block_cast_lossless.py
ERR_SPREAD, ERR_NOT_POW2, ERR_WEIGHT_SF = 1, 2, 3
BLOCK_ROWS = (1, 32, 128)
BLOCK_COLS = (32, 128)

# [code, where0, where1, 0] (codes ERR_*)
flag = error_flags.HostMappedWords(4)


def raise_pending(device_index):
    words = flag(device_index)[1]
    code, a, b = words[0], words[1], words[2]
    if not code:
        return
    words[0] = 0
    where = "Raised at the first per_block_cast_lossless / batched_transpose_weight_sf call or check_errors() " \
            "after that kernel finished; the outputs of those blocks are unspecified."
    if code == ERR_SPREAD:
        msg = (f"per_block_cast_lossless on cuda:{device_index}: the scale exponent of row {a}, input scale "
               f"column {b} is more than 11 below the maximum of its output block, so it cannot be represented "
               f"exactly in e4m3 (the peer device-asserts here).")
    elif code == ERR_NOT_POW2:
        msg = (f"per_block_cast_lossless on cuda:{device_index}: the fp32 input scale of row {a}, scale column {b} "
               f"is not a non-negative power of two.")
    else:
        msg = (f"batched_transpose_weight_sf on cuda:{device_index}: sf[{a}] holds a value that is not a "
               f"non-negative power of two (flat index {b}); UE8M0 cannot represent it.")
    raise LosslessScaleError(f"{msg} {where}")


def after_launch(device_index):
    """Honour the synchronous-check mode shared with the routing ops (kernelkiln.moe.set_sync_checks)."""
    if checks.sync_checks[0] and not torch.cuda.is_current_stream_capturing():
        torch.cuda.current_stream(device_index).synchronize()
        raise_pending(device_index)


def check_errors(device=None):
    """Synchronize ``device`` and raise any error a KernelKiln kernel recorded there (quant and moe)."""
    if device is not None and not isinstance(device, int) and torch.device(device).type == "npu":
        from kernelkiln.moe import _topk  # on an NPU only topk_gate records errors
        return _topk.check_errors(device)
    config.require_cuda("check_errors")
    index = torch.cuda.current_device() if device is None else torch.device(device).index
    torch.cuda.synchronize(index)
    raise_pending(index)
    from kernelkiln.moe import _topk  # imported here: a quant call must not load the routing family
    _topk.check_errors(index)


def _block(name, v):
    if not (isinstance(v, (tuple, list)) and len(v) == 2 and
            all(isinstance(b, int) and not isinstance(b, bool) for b in v)):
        raise TypeError(f"{name} must be a (rows, cols) pair of ints, got {v!r}")
    if v[0] not in BLOCK_ROWS or v[1] not in BLOCK_COLS:
        raise ValueError(f"{name} must have rows in {BLOCK_ROWS} and cols in {BLOCK_COLS}, got {tuple(v)}")
    return int(v[0]), int(v[1])


def _lg(v):
    return v.bit_length() - 1


def _check(x, fmt, x_block_size, out_block_size, col_major, round_sf, packed):
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        raise TypeError("x must be a (data, sf) pair: e2m1 int8 [T, H/2] and power-of-two scales")
    checks.choice("fmt", fmt, ("e4m3",))
    bi, bo = _block("x_block_size", x_block_size), _block("out_block_size", out_block_size)
    if bo[0] % bi[0] or bo[1] % bi[1]:
        raise ValueError(f"out_block_size {bo} must be a multiple of x_block_size {bi}")
    checks.scale_flags(round_sf, packed, use_tma_aligned_col_major_sf=col_major)
    data, sf = x
    checks.tensor("x[0] (data)", data, (torch.int8,), ndim=2)
    t, h = data.shape[0], data.shape[1] * 2
    if h % 128 or h == 0:
        raise ValueError(f"the hidden size 2 * x[0].shape[1] must be a positive multiple of 128, got {h}")
    if data.stride(1) != 1 or (t > 1 and data.stride(0) % 16):
        raise ValueError(f"x[0] must have inner stride 1 and a row stride that is a multiple of 16 bytes; got "
                         f"strides {tuple(data.stride())}")
    checks.aligned("x[0] (data)", data, 16)
    checks.tensor("x[1] (sf)", sf, (torch.float32, torch.int32), ndim=2)
    mb, kb = -(-t // bi[0]), h // bi[1]
    shape = (mb, -(-kb // 4)) if sf.dtype == torch.int32 else (mb, kb)
    if tuple(sf.shape) != shape:
        what = "packed UE8M0 int32" if sf.dtype == torch.int32 else "fp32"
        raise ValueError(f"x[1] (sf, {what}) must have shape {shape} for T={t}, H={h}, x_block_size={bi}; "
                         f"got {tuple(sf.shape)}")
    checks.same_device("x[1] (sf)", sf, "x[0] (data)", data)
    return data, sf, t, h, bi, bo


def _strides(sf):
    """(mode, per-row, per-column) strides the kernel uses: fp32 elements, or bytes for UE8M0."""
    s0, s1 = sf.stride()
    return (SF_UE8M0, 4 * s0, 4 * s1) if sf.dtype == torch.int32 else (SF_FP32, s0, s1)


def per_block_cast_lossless(x, fmt, x_block_size, out_block_size, use_tma_aligned_col_major_sf=False,
                            round_sf=False, use_packed_ue8m0=False):
    """Exact MXFP4 -> FP8 e4m3 with coarser power-of-two blocks; returns ``(q [T, H] e4m3, sf)``.

    Same signature and outputs as tile_kernels 2.1 ``quant.per_block_cast_lossless``: x = (e2m1
    int8 [T, H/2], fp32 power-of-two or packed UE8M0 scales over x_block_size, any layout);
    sf is fp32 [ceil(T/gm), H/g] (powers of two) or packed UE8M0 int32, optionally TMA-aligned
    column-major. round_sf changes nothing (the scales are powers of two either way). Inputs that
    cannot convert exactly raise ``LosslessScaleError`` (see the module docstring for when).
    """
    data, sf, t, h, bi, bo = _check(x, fmt, x_block_size, out_block_size, use_tma_aligned_col_major_sf,
                                    round_sf, use_packed_ue8m0)
    checks.cuda("x[0] (data)", data)
    dev = data.device.index
    raise_pending(dev)
    q = torch.empty((t, h), dtype=torch.float8_e4m3fn, device=data.device)
    osf = _sf_storage(-(-t // bo[0]), h // bo[1], torch.int32 if use_packed_ue8m0 else torch.float32,
                      use_tma_aligned_col_major_sf, data.device, use_packed_ue8m0)
    if t == 0:
        return q, osf
    in_mode, in_t, in_k = _strides(sf)
    out_mode, out_t, out_k = _strides(osf)
    err = flag(dev)[0]
    launch(CONTRACT, CONTRACT.key(fmt=fmt), data.device,
           x=data.data_ptr(), out=q.data_ptr(), in_sf=sf.data_ptr() if in_mode == SF_FP32 else 0,
           in_sfb=sf.data_ptr() if in_mode == SF_UE8M0 else 0, out_sf=osf.data_ptr() if out_mode == SF_FP32 else 0,
           out_sfb=osf.data_ptr() if out_mode == SF_UE8M0 else 0, err=err.data_ptr(), num_tokens=t,
           hidden_div128=h // 128, x_stride_q=data.stride(0) // 16, out_stride_q=q.stride(0) // 16, in_mode=in_mode,
           in_sf_t=in_t, in_sf_k=in_k, lg_bm_in=_lg(bi[0]), lg_kq_in=_lg(bi[1] // 32), out_mode=out_mode,
           out_sf_t=out_t, out_sf_k=out_k, lg_bm_out=_lg(bo[0]), lg_kq_out=_lg(bo[1] // 32))
    after_launch(dev)
    return q, osf
