"""transpose / batched_transpose (tile_kernels v1 ``transpose`` module signatures, docs/SPEC.md §3.3).

[M, N] or [B, M, N] with M, N multiples of 64, inner stride 1 and row (and batch)
strides multiples of 4 elements -> contiguous [N, M] / [B, N, M]. The kernel moves
raw bits, so the variant is picked by element width; 16-byte loads are used
whenever the strides and the base address allow them.
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln_contract.transpose import BATCHED_TRANSPOSE as CONTRACT
from kernelkiln_contract.transpose import transpose_vectors, transpose_wide_loads

OP = CONTRACT.op
DTYPES = (torch.float8_e4m3fn, torch.bfloat16, torch.float32)
TILE = 64
MAX_GRID_YZ = 65535  # CUDA limit of gridDim.y / gridDim.z (M / 64 or N / 64, and B)
# Per element width: whether consecutive CTAs walk M (m_fast: they fill the same output rows) or N, a runtime
# argument. Chosen on the H200 together with the vectors per thread (the measurements are in
# kernelkiln_contract.transpose, beside TUNED_VECTORS).
M_FAST = {1: False, 2: True, 4: True}


def _check(name, x, ndim):
    checks.tensor(name, x, DTYPES, ndim=ndim)
    m, n = x.shape[-2:]
    if m % TILE or n % TILE:
        raise ValueError(f"{name} must have its last two dims (M, N) multiples of {TILE}, got "
                         f"shape {tuple(x.shape)}")
    if x.numel() and x.stride(-1) != 1:
        raise ValueError(f"{name} must have inner stride 1, got strides {tuple(x.stride())}")
    if x.numel() and any(s % 4 for s in x.stride()[:-1]):
        raise ValueError(f"{name} must have row (and batch) strides that are multiples of 4 elements, got "
                         f"strides {tuple(x.stride())}")
    if ndim == 3 and x.shape[0] > MAX_GRID_YZ:
        raise ValueError(f"{name}.shape[0] (batch) must be at most {MAX_GRID_YZ}, got {x.shape[0]}")
    if m // TILE > MAX_GRID_YZ:
        raise ValueError(f"{name}.shape[-2] (M) must be at most {MAX_GRID_YZ * TILE}, got {m}")


def _run(x3):
    """Transpose [B, M, N] (validated) into a new contiguous [B, N, M]."""
    b, m, n = x3.shape
    y = torch.empty((b, n, m), dtype=x3.dtype, device=x3.device)
    if y.numel() == 0:
        return y
    checks.cuda("x", x3)
    eb = x3.element_size()
    checks.aligned("x", x3, 4 * eb)
    sm, sb = x3.stride(1), x3.stride(0)
    if b == 1:
        sb = 0  # never used; a size-1 batch's stride is arbitrary
    # 16-byte loads when every row start is 16-byte aligned; otherwise 4-element loads.
    wide = transpose_wide_loads(eb, x3.data_ptr(), sm, sb)
    lv = 16 // eb if wide else 4
    m_fast = M_FAST[eb] and n // TILE <= MAX_GRID_YZ  # N / 64 then is gridDim.y
    tiles_x, tiles_y = (m // TILE, n // TILE) if m_fast else (n // TILE, m // TILE)
    launch(CONTRACT, CONTRACT.key(elem_bytes=eb, wide_loads=wide, vectors_per_thread=transpose_vectors(eb)),
           x3.device, x=x3.data_ptr(), y=y.data_ptr(), num_batches=b, tiles_x=tiles_x, tiles_y=tiles_y,
           x_stride_m=sm // lv, x_stride_b=sb // lv, m_fast=int(m_fast))
    return y


def batched_transpose(x):
    """[B, M, N] -> contiguous [B, N, M] (e4m3, bf16 or fp32)."""
    _check("x", x, 3)
    return _run(x)


def transpose(x):
    """[M, N] -> contiguous [N, M] (e4m3, bf16 or fp32)."""
    _check("x", x, 2)
    return _run(x.unsqueeze(0))[0]
