"""Bit-exact comparison shared by the GPU tests (importable: tests/ is on sys.path through its conftest)."""
import torch


def raw_bytes(t):
    """The tensor's values as uint8 bytes in logical (row-major) order, flat. Copied into a fresh flat tensor:
    torch calls a column-major scale tensor with a size-1 dimension contiguous and keeps its strides
    (e.g. [1, 1] with strides (4, 4)), and view(uint8) rejects a last stride other than 1."""
    flat = torch.empty(t.numel(), dtype=t.dtype, device=t.device)
    flat.copy_(t.reshape(-1))
    return flat.view(torch.uint8)


def assert_bitwise(actual, expected, what):
    """Same dtype, same shape and the same bytes; the message names the first differing byte."""
    assert actual.dtype == expected.dtype and tuple(actual.shape) == tuple(expected.shape), \
        f"{what}: {actual.dtype}{tuple(actual.shape)} != {expected.dtype}{tuple(expected.shape)}"
    a, e = raw_bytes(actual).cpu().reshape(-1), raw_bytes(expected).cpu().reshape(-1)
    bad = (a != e).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} of {a.numel()} bytes differ, first at byte {bad[0].item()}"
