"""normalize_weight on the GPU: bit-identical denominator and weights to the butterfly reference."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import normalize_weight as ref_normalize

pytestmark = pytest.mark.gpu


def _weights(t, k):
    # Positive weights over many binades so the summation order shows in the last bits.
    return torch.rand(t, k, device="cuda") * torch.exp2(torch.randint(-20, 4, (t, k), device="cuda").float())


@pytest.mark.parametrize("k", [1, 2, 6, 7, 8, 9, 16, 17, 32])
@pytest.mark.parametrize("t", [1, 5, 4001, 16384])
def test_matches_reference_bitwise(seed, t, k):
    w = _weights(t, k)
    den, out = kernelkiln.moe.normalize_weight(w)
    ref_den, ref_out = ref_normalize(w)
    assert den.shape == (t,) and out.shape == (t, k) and out.is_contiguous()
    assert torch.equal(den.view(torch.int32), ref_den.view(torch.int32))
    assert torch.equal(out.view(torch.int32), ref_out.view(torch.int32))


def test_strided_rows_zeros_and_signed_zeros(seed):
    base = _weights(300, 16)
    w = base[:, :8]  # row stride 16
    w[3] = 0.0
    w[4] = -0.0
    w[5, ::2] = -0.0
    den, out = kernelkiln.moe.normalize_weight(w)
    ref_den, ref_out = ref_normalize(w.contiguous())
    assert torch.equal(den.view(torch.int32), ref_den.view(torch.int32))
    assert torch.equal(out.view(torch.int32), ref_out.view(torch.int32))


def test_zero_tokens():
    den, out = kernelkiln.moe.normalize_weight(torch.empty(0, 8, device="cuda"))
    assert den.shape == (0,) and out.shape == (0, 8)
