"""CPU tests of the SwiGLU references (kernelkiln.torch.swiglu)."""
import pytest
import torch

from kernelkiln.torch import get_mapping_from_psum, swiglu_backward, swiglu_forward


def test_mapping_marks_padding_rows():
    x = torch.zeros(300, 4)
    psum = torch.tensor([5, 5, 130, 260], dtype=torch.int32)  # expert 1 empty
    mask = get_mapping_from_psum(x, psum, alignment=128)
    expected = torch.zeros(300, dtype=torch.bool)
    expected[0:5] = True      # expert 0: [0, 5)
    expected[128:130] = True  # expert 2: [align(5)=128, 130); expert 1 [128, 5) is empty
    expected[256:260] = True  # expert 3: [align(130)=256, 260); rows >= 260 belong to no expert
    assert torch.equal(mask, expected)


def test_forward_formula_and_weights():
    torch.manual_seed(0)
    x = torch.randn(6, 128)
    w = torch.rand(6)
    y = swiglu_forward(x, topk_weights=w, routed_scaling_factor=2.5)
    a, u = x[:, :64], x[:, 64:]
    expected = a / (1 + torch.exp(-a)) * u * (w * 2.5).unsqueeze(1)
    torch.testing.assert_close(y, expected, rtol=0, atol=0)
    assert y.dtype == torch.float32 and y.shape == (6, 64)


def test_clamp_and_counts_only_valid_rows():
    x = torch.zeros(4, 128)
    x[:, 0] = 20.0    # gate above c
    x[:, 64] = 20.0   # up above c
    x[:, 65] = -20.0  # up below -c
    x[3, 1] = float("nan")  # NaN is never counted and stays NaN
    counts = torch.zeros(4, dtype=torch.int64)
    psum = torch.tensor([2, 3], dtype=torch.int32)  # alignment 2: rows 0,1 and [2, 3) -> row 3 is padding
    y = swiglu_forward(x, psum_num_tokens_per_expert=psum, clamp_value=10.0, clamped_count=counts, alignment=2)
    assert counts.tolist() == [3, 3, 3, 3 * 64]
    c = torch.tensor(10.0)
    assert y[0, 0] == c / (1 + torch.exp(-c)) * c  # gate and up both clamped to 10
    assert torch.isnan(y[3, 1])


def test_clamped_count_needs_clamp_value():
    with pytest.raises(ValueError, match="clamp_value"):
        swiglu_forward(torch.zeros(1, 128), clamped_count=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="topk_weights"):
        swiglu_forward(torch.zeros(1, 128), routed_scaling_factor=2.0)


def test_backward_matches_autograd_and_zeroes_padding():
    torch.manual_seed(1)
    x = torch.randn(5, 128, dtype=torch.float64).float()
    dy = torch.randn(5, 64)
    w = torch.rand(5)
    psum = torch.tensor([3, 5], dtype=torch.int32)  # alignment 4: rows 3 is padding... [4, 5) valid
    grad, wg, out = swiglu_backward(x, dy, psum, w, 2.0, clamp_value=1.0, alignment=4)
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    a, u = xr[:, :64], xr[:, 64:]
    y = (torch.clamp(a, max=1.0) * torch.sigmoid(torch.clamp(a, max=1.0)) * torch.clamp(u, -1.0, 1.0)
         * (wr * 2.0).unsqueeze(1))
    valid = torch.tensor([1, 1, 1, 0, 1], dtype=torch.bool)
    (y * dy * valid.unsqueeze(1)).sum().backward()
    torch.testing.assert_close(grad, xr.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wg, wr.grad, rtol=1e-5, atol=1e-5)
    assert torch.all(grad[3] == 0) and wg[3] == 0 and torch.all(out[3] == 0)
    torch.testing.assert_close(out[valid], y.detach()[valid], rtol=1e-6, atol=1e-6)
