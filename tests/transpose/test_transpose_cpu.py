"""Argument errors of transpose / batched_transpose: raised before any device work (no GPU needed)."""
import pytest
import torch

import kernelkiln


@pytest.mark.parametrize("fn,x,exc,match", [
    ("transpose", torch.zeros(64, 64, dtype=torch.float16), TypeError, "x has dtype torch.float16; allowed"),
    ("transpose", torch.zeros(64, 64, 1), ValueError, "x must be 2-D"),
    ("batched_transpose", torch.zeros(64, 64), ValueError, "x must be 3-D"),
    ("transpose", torch.zeros(64, 96), ValueError, r"multiples of 64"),
    ("batched_transpose", torch.zeros(2, 32, 64), ValueError, r"multiples of 64"),
    ("transpose", torch.zeros(64, 128)[:, ::2], ValueError, "inner stride 1"),
    ("transpose", torch.zeros(64, 130)[:, :64].as_strided((64, 64), (130, 1)), ValueError,
     "multiples of 4 elements"),
    ("batched_transpose", torch.zeros(2 * 64 * 64 + 2)[:2 * 64 * 64].as_strided((2, 64, 64), (4098, 64, 1)),
     ValueError, "multiples of 4 elements"),
    ("transpose", [[1.0]], TypeError, "x must be a torch.Tensor"),
])
def test_bad_inputs(fn, x, exc, match):
    with pytest.raises(exc, match=match):
        getattr(kernelkiln.transpose, fn)(x)


def test_valid_cpu_input_asks_for_cuda():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        kernelkiln.transpose.transpose(torch.zeros(64, 128, dtype=torch.bfloat16))


def test_empty_needs_no_device():
    y = kernelkiln.transpose.batched_transpose(torch.zeros(0, 64, 128, dtype=torch.float8_e4m3fn))
    assert y.shape == (0, 128, 64) and y.dtype == torch.float8_e4m3fn
    assert kernelkiln.transpose.transpose(torch.zeros(0, 64)).shape == (64, 0)


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        y = torch.ops.kernelkiln.batched_transpose(torch.empty(8, 128, 64, dtype=torch.bfloat16, device="cuda"))
        assert y.shape == (8, 64, 128) and y.is_contiguous()
