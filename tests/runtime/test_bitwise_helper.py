"""The GPU tests' bit-exact comparison (tests/bitwise.py) catches a single flipped bit and a dtype change."""
import pytest
import torch
from bitwise import assert_bitwise


def test_assert_bitwise_is_strict():
    a = torch.randn(4, 8).to(torch.float8_e4m3fn)
    assert_bitwise(a, a.clone(), "same")
    flipped = a.clone().view(torch.uint8)
    flipped[2, 3] ^= 1
    with pytest.raises(AssertionError, match="1 of 32 bytes differ, first at byte 19"):
        assert_bitwise(a, flipped.view(torch.float8_e4m3fn), "x")
    with pytest.raises(AssertionError, match="float32"):
        assert_bitwise(a, a.float(), "x")
    with pytest.raises(AssertionError, match=r"\(4, 8\) != .*\(8, 4\)"):
        assert_bitwise(a, a.t().contiguous(), "x")


def test_assert_bitwise_takes_a_one_column_column_major_tensor():
    """[T, 1] int32 with strides (1, T): torch calls it contiguous, yet its stride(-1) is T (packed UE8M0
    scales of a one-block row in TMA-aligned column-major layout)."""
    col = torch.arange(4, dtype=torch.int32).as_strided((4, 1), (1, 4))
    assert_bitwise(col, torch.arange(4, dtype=torch.int32).reshape(4, 1), "col")
    with pytest.raises(AssertionError, match="bytes differ"):
        assert_bitwise(col, torch.arange(1, 5, dtype=torch.int32).reshape(4, 1), "col")
    one = torch.full((4,), 7, dtype=torch.int32).as_strided((1, 1), (4, 4))  # one token, one block
    assert_bitwise(one, torch.full((1, 1), 7, dtype=torch.int32), "one")
