"""kernelkiln.rand on CUDA: the same stream as torch.randn under the same generator state."""
import pytest
import torch

import kernelkiln

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16])
def test_randn_stream_equals_torch_randn(dtype):
    kernelkiln.rand.set_seed(42)
    a = kernelkiln.rand.randn(1000, 17, dtype=dtype)
    b = kernelkiln.rand.randn_like(a)
    torch.manual_seed(42)
    assert a.is_cuda and torch.equal(a, torch.randn(1000, 17, dtype=dtype, device="cuda"))
    assert torch.equal(b, torch.randn(1000, 17, dtype=a.dtype, device="cuda"))
