"""transpose / batched_transpose on the GPU: bit-identical to torch's transpose, every dtype and layout."""
import pytest
import torch

import kernelkiln

pytestmark = pytest.mark.gpu
DTYPES = [torch.float8_e4m3fn, torch.bfloat16, torch.float32]


def _random(shape, dtype):
    # Values over many binades (never all zeros), compared as raw bytes.
    x = torch.randn(shape, device="cuda") * torch.exp2(torch.randint(-8, 8, shape, device="cuda").float())
    return x.to(dtype)


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n", [(64, 64), (128, 192), (4032, 7168), (7168, 2048), (64, 4096)])
def test_transpose_matches_torch(seed, dtype, m, n):
    x = _random((m, n), dtype)
    y = kernelkiln.transpose.transpose(x)
    assert y.shape == (n, m) and y.dtype == dtype and y.is_contiguous()
    assert torch.equal(_bits(y), _bits(x.t().contiguous()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,m,n", [(1, 64, 64), (8, 2048, 7168), (32, 192, 320), (3, 4096, 128)])
def test_batched_transpose_matches_torch(seed, dtype, b, m, n):
    x = _random((b, m, n), dtype)
    y = kernelkiln.transpose.batched_transpose(x)
    assert y.shape == (b, n, m) and y.is_contiguous()
    assert torch.equal(_bits(y), _bits(x.transpose(1, 2).contiguous()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_inputs_use_the_narrow_loads(seed, dtype):
    # Row stride a multiple of 4 elements but not of 16 bytes (bf16/e4m3), a batch stride with a gap,
    # and a base 4 elements past a 16-byte boundary: the 4-element-load variant.
    big = _random((3, 200, 644), dtype)
    x = big[:, 4:196, 4:580]  # [3, 192, 576], row stride 644, batch stride 128800
    y = kernelkiln.transpose.batched_transpose(x)
    assert torch.equal(_bits(y), _bits(x.transpose(1, 2).contiguous()))
    x2 = big[1, 8:136, 4:132]
    assert torch.equal(_bits(kernelkiln.transpose.transpose(x2)), _bits(x2.t().contiguous()))


def test_zero_sized():
    x = torch.empty(0, 64, 128, device="cuda", dtype=torch.bfloat16)
    assert kernelkiln.transpose.batched_transpose(x).shape == (0, 128, 64)
    assert kernelkiln.transpose.transpose(torch.empty(0, 64, device="cuda")).shape == (64, 0)
