"""topk_sum_and_topk_group_idx on the GPU: indices identical to the reference (computed on the CPU, where
torch's stable sort treats equal group scores by index), including constructed ties."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import topk_sum_and_topk_group_idx as ref

pytestmark = pytest.mark.gpu


def _scores(t, g, epg):
    # Positive and negative values over many binades; never zero (the sign of a zero sum is not specified).
    mag = torch.rand(t, g, epg, device="cuda") + 0.5
    sign = torch.randint(0, 2, (t, g, epg), device="cuda").float() * 2 - 1
    return mag * sign * torch.exp2(torch.randint(-8, 8, (t, g, epg), device="cuda").float())


def _check(x, num_topk_sum, k):
    out = kernelkiln.moe.topk_sum_and_topk_group_idx(x, num_topk_sum, k)
    expect = ref(x.cpu(), num_topk_sum, k)
    assert out.shape == (x.shape[0], k) and out.dtype == torch.int64 and out.is_contiguous()
    assert torch.equal(out.cpu(), expect)


@pytest.mark.parametrize("e,g", [(72, 4), (72, 8), (72, 12), (256, 4), (256, 8), (256, 16)])
@pytest.mark.parametrize("num_topk_sum", [1, 2])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("t", [1, 4001, 8001])
def test_matches_reference(seed, t, e, g, num_topk_sum, k):
    _check(_scores(t, g, e // g), num_topk_sum, k)


@pytest.mark.parametrize("e,g", [(72, 12), (256, 8), (256, 16), (64, 32), (30, 3)])
@pytest.mark.parametrize("num_topk_sum", [1, 2])
def test_all_groups_and_odd_layouts(seed, e, g, num_topk_sum):
    _check(_scores(1000, g, e // g), num_topk_sum, g)


@pytest.mark.parametrize("e,g", [(72, 8), (256, 8), (256, 16)])
@pytest.mark.parametrize("num_topk_sum", [1, 2])
def test_constructed_ties(seed, e, g, num_topk_sum):
    t, epg = 2000, e // g
    # few distinct values: equal maxima inside a group (top-2 = the same value twice) and equal group scores
    x = (torch.randint(1, 5, (t, g, epg), device="cuda").float() * 0.25)
    x[0] = 1.0  # every group ties: 0, 1, 2, ...
    x[1, :, 0] = 2.0  # top-1 ties everywhere; top-2 sums differ only through the rest
    x[2, ::2] = 3.0  # the even groups tie for first place
    _check(x, num_topk_sum, min(4, g))
    assert torch.equal(kernelkiln.moe.topk_sum_and_topk_group_idx(x, num_topk_sum, g)[0].cpu(), torch.arange(g))


def test_unaligned_base_uses_scalar_loads(seed):
    # a view starting 4 bytes in: contiguous, E/G % 4 == 0, but not 16-byte aligned -> the scalar path
    flat = _scores(1, 1, 1 + 500 * 256).reshape(-1)
    x = flat[1:].view(500, 8, 32)
    assert x.data_ptr() % 16 != 0
    _check(x, 2, 4)


def test_zero_tokens():
    out = kernelkiln.moe.topk_sum_and_topk_group_idx(torch.empty(0, 8, 32, device="cuda"), 2, 4)
    assert out.shape == (0, 4) and out.dtype == torch.int64


def test_torch_compile(seed):
    x = _scores(64, 8, 32)
    fn = torch.compile(lambda s: kernelkiln.moe.topk_sum_and_topk_group_idx(s, 2, 4), fullgraph=True)
    assert torch.equal(fn(x).cpu(), ref(x.cpu(), 2, 4))
