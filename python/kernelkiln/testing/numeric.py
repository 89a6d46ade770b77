"""Comparisons for tests (the peer's ``tile_kernels.testing.numeric``): same names, arguments and outcomes."""
import math

import torch


def _as_bytes(t):
    # a flat, dense copy first: a contiguous [N, 1] tensor may keep a stride of N in its last dim, which view rejects
    flat = t.contiguous().flatten()
    return flat.as_strided((flat.numel(),), (1,)).view(torch.uint8)


def assert_equal(x, y, check_dtype=True, check_shape=True, check_stride=True):
    """Raise AssertionError unless x and y hold the same bytes (and, as asked, dtype, shape, strides; always device)."""
    if check_dtype and x.dtype != y.dtype:
        raise AssertionError(f"Tensor dtypes are not equal: {x.dtype} vs {y.dtype}")
    if check_shape and x.shape != y.shape:
        raise AssertionError(f"Tensor shapes are not equal: {x.shape} vs {y.shape}")
    if check_stride and x.numel() and x.stride() != y.stride():
        raise AssertionError(f"Tensor strides are not equal: {x.stride()} vs {y.stride()}")
    if x.device != y.device:
        raise AssertionError(f"Tensor devices are not equal: {x.device} vs {y.device}")
    xb, yb = _as_bytes(x), _as_bytes(y)
    if torch.equal(xb, yb):
        return
    try:
        where = x != y
        detail = f"mask={torch.nonzero(where)}\n{x[where]}\nvs\n{y[where]}"
    except RuntimeError:  # dtypes without != on this device: show the bytes
        where = xb != yb
        detail = f"byte_mask={torch.nonzero(where)}\n{xb[where]}\nvs\n{yb[where]}"
    raise AssertionError(f"Tensor values are not equal: x.shape={x.shape} vs y.shape={y.shape}\n{detail}")


def calc_diff(x, y):
    """|x - y|^2 / (|x|^2 + |y|^2) in float64 (0 where both are zero): 0 for equal tensors, 1 for orthogonal ones."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0
    d = x - y
    return (d * d).sum() / denominator


def check_bias(x, ref_x):
    """Assert that x rounds ref_x without bias: the share of x below ref_x (ties count half) is within
    10 / sqrt(n) of one half, far outside what an unbiased rounding of n values produces."""
    n = x.numel()
    if n == 0:
        return
    below, equal = (x < ref_x).sum(), (x == ref_x).sum()
    ratio = (below + equal / 2) / n
    if not abs(ratio - 0.5) < 10 / math.sqrt(n):
        raise AssertionError(f"Less than ratio not close to 0.5 (size = {n}): less_ratio={ratio:.4f}\n"
                             f"  Less than: {below}\n  Equal to:  {equal}\n  Greater than: {n - below - equal}\n")


def count_bytes(*tensors):
    """Bytes of every tensor given, in nested tuples and lists too; None counts nothing."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total
