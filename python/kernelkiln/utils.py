"""Small integer and dtype helpers of the peer's ``tile_kernels.utils`` (same names and results)."""
import torch

_FORMAT_OF_DTYPE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3", torch.int8: "e2m1"}
_DTYPE_OF_FORMAT = {fmt: dtype for dtype, fmt in _FORMAT_OF_DTYPE.items()}


def ceil_div(x: int, y: int) -> int:
    """The smallest integer >= x / y, for y > 0."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """x rounded up to a multiple of y."""
    return ceil_div(x, y) * y


def is_power_of_two(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def next_power_of_two(x: int) -> int:
    """The smallest power of two >= x, for x >= 1."""
    return 1 << (x - 1).bit_length()


def dtype_to_str(dtype: torch.dtype) -> str:
    """The format name of a tensor dtype: fp32, bf16, e4m3, or e2m1 (packed FP4 lives in int8)."""
    try:
        return _FORMAT_OF_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} has no format name; supported: {list(_FORMAT_OF_DTYPE)}") from None


def str_to_dtype(fmt: str) -> torch.dtype:
    """The tensor dtype of a format name (the inverse of dtype_to_str)."""
    try:
        return _DTYPE_OF_FORMAT[fmt]
    except KeyError:
        raise ValueError(f"fmt must be one of {list(_DTYPE_OF_FORMAT)}, got {fmt!r}") from None
