"""CPU checks of the 2.1 router / v1 aux references (kernelkiln.torch.moe_router)."""
import pytest
import torch

from kernelkiln.torch import moe_router as R


def test_philox_known_answer_vectors():
    # Random123 kat_vectors: philox4x32 10, counter (4 words), key (2 words) -> 4 words
    cases = [([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
             ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
             ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
              [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1])]
    for ctr, key, want in cases:
        got = R.philox4x32_10(torch.tensor(ctr, dtype=torch.int64), torch.tensor(key, dtype=torch.int64))
        assert got.tolist() == want


def test_curand_uniform_range():
    w = R.curand_uniform(torch.tensor([0, 2**32 - 1], dtype=torch.int64))
    assert w[0].item() == 2.0**-33 and 0 < w[1].item() <= 1.0


@pytest.mark.parametrize("slots,n", [(9, 257), (32, 32), (8, 9), (3, 1000)])
def test_random_rows_distinct_and_in_range(slots, n):
    idx, w = R._random_rows(torch.arange(500), slots, n, seed=3)
    assert idx.shape == (500, slots) and (idx >= 0).all() and (idx < n).all()
    assert all(len(set(r)) == slots for r in idx.tolist())
    assert ((w > 0) & (w <= 1)).all()


def _fwd(logits, **kw):
    args = dict(num_topk=8, use_shared_as_routed=False, num_shared_experts=0, routed_scaling_factor=2.5, ep_rank=0)
    args.update(kw)
    return R.moe_topk_gate_forward(logits, **args)


def test_forward_basic_semantics(seed):
    logits = torch.randn(64, 256) * 3
    bias = torch.randn(256) * 0.1
    scores = torch.empty(64, 256)
    un = torch.empty(64, 8, dtype=torch.int64)
    idx, w = _fwd(logits, bias=bias, scores=scores, unmapped_topk_idx=un)
    s = R.sqrt_softplus(logits)
    assert torch.equal(scores, s) and torch.equal(un, idx)
    want = torch.sort(s + bias, dim=1, descending=True, stable=True).indices[:, :8]
    assert torch.equal(idx, want)
    picked = s.gather(1, idx)
    torch.testing.assert_close(w, picked / picked.sum(1, keepdim=True) * 2.5)


def test_forward_ties_go_to_smaller_index():
    idx, _ = _fwd(torch.zeros(3, 64))
    assert (idx == torch.arange(8)).all()


def test_forward_shared_map_mask_fixed_random_image(seed):
    t, e = 40, 64
    logits = torch.randn(t, e)
    mask = torch.ones(t, dtype=torch.bool)
    mask[:5] = False
    rnd = torch.zeros(t, dtype=torch.bool)
    rnd[5:10] = True
    fixed = torch.zeros(t, dtype=torch.bool)
    fixed[10:15] = True
    un = torch.randint(0, e, (t, 8))
    un_before = un.clone()
    img = torch.zeros(t, dtype=torch.bool)
    img[20:] = True
    image_bias = torch.zeros(e)
    image_bias[7] = 100.0
    phys = torch.arange((e + 1) * 2, dtype=torch.int32).view(e + 1, 2)
    count = torch.full((e + 1,), 2, dtype=torch.int32)
    scores = torch.empty(t, e)
    idx, w = _fwd(logits, use_shared_as_routed=True, num_shared_experts=1, mask=mask, force_random=rnd,
                  fix_routing_mask=fixed, unmapped_topk_idx=un, image_bias=image_bias, image_token_mask=img,
                  to_physical_map=phys, logical_count=count, scores=scores, ep_rank=1)
    assert (idx[:5] == -1).all() and (w[:5] == 0).all() and (un[:5] == -1).all() and (scores[:5] == 0).all()
    assert (un[5:10] == -1).all() and (scores[5:10] == 0).all() and (idx[5:10] < 2 * (e + 1)).all()
    assert torch.equal(un[10:15], un_before[10:15])
    tok = torch.arange(t)
    dup = (1 + tok * 23333) % 2
    assert torch.equal(idx[15:, -1], (e * 2 + dup[15:]))  # shared expert E mapped
    assert (w[15:, -1] == 1).all()
    assert torch.equal(idx[20:, 0], 7 * 2 + dup[20:])  # image bias forces expert 7 first


def test_forward_rejects_non_finite_routed_rows():
    logits = torch.randn(4, 64)
    logits[2, 3] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        _fwd(logits)
    mask = torch.tensor([True, True, False, True])
    _fwd(logits, mask=mask)  # masked rows are not read


def test_backward_matches_autograd(seed):
    t, e, k = 32, 64, 6
    x = (torch.randn(t, e, dtype=torch.float64) * 2).requires_grad_()
    s64 = torch.nn.functional.softplus(x).sqrt()
    idx = torch.sort(s64.detach(), dim=1, descending=True, stable=True).indices[:, :k]
    picked = s64.gather(1, idx)
    w64 = picked / (picked.sum(1, keepdim=True) + 1e-20) * 2.5
    g = torch.randn(t, k, dtype=torch.float64)
    mask = torch.rand(t) > 0.3
    h = torch.randn(4, e, dtype=torch.float64)
    aux = (s64 / s64.sum(1, keepdim=True)) * mask[:, None]
    loss = (w64 * g).sum() + (aux * h.repeat_interleave(t // 4, 0)).sum()
    loss.backward()
    s = s64.detach().float()
    got = R.moe_topk_gate_backward(s, idx, w64.detach().float(), g.float(), 2.5, mask=mask,
                                   grad_scores_sum=h.float())
    torch.testing.assert_close(got, x.grad.float(), rtol=2e-4, atol=1e-5)


def test_sqrt_softplus_grad_close_to_exact():
    x = torch.linspace(-15, 30, 2001, dtype=torch.float64)
    exact = torch.sigmoid(x) / (2 * torch.nn.functional.softplus(x).sqrt())
    got = R.sqrt_softplus_grad(R.sqrt_softplus(x.float()))
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-7)


def test_mask_indices_by_tp():
    idx = torch.tensor([[0, 7, 8, 15, 16, 31, -1]])
    # n = 32 over 4 EP ranks (8 per GPU), 2 TP ranks: rank 0 owns GPUs 0, 2 -> local 0..15
    out = R.mask_indices_by_tp(idx, 32, 4, 0, 2)
    assert out.tolist() == [[0, 7, -1, -1, 8, -1, -1]]
    out = R.mask_indices_by_tp(idx.int(), 32, 4, 1, 2)
    assert out.dtype == torch.int32 and out.tolist() == [[-1, -1, 0, 7, -1, 15, -1]]


def test_group_count_aux_fi_unique():
    idx = torch.tensor([[0, 1, 1, -1], [3, 3, 3, 0]])
    assert R.group_count(idx, 5).tolist() == [2, 2, 0, 3, 0]
    fi = R.aux_fi(idx, 4, 2)
    assert fi.tolist() == [2 * 4 / 4, 2 * 4 / 4, 0.0, 3 * 4 / 4]
    R.inplace_unique_group_indices(idx, 8)
    assert idx.tolist() == [[0, 1, -1, -1], [3, -1, -1, 0]]
