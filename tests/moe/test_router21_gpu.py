"""moe_topk_gate_forward on the GPU: bit-identical to kernelkiln.torch.moe_topk_gate_forward (run on the GPU
tensors, so softplus/sqrt use torch's CUDA formulas, which the kernel reproduces), incl. force_random
(curand Philox4_32_10 written out in the kernel and the reference); backward and v1 aux ops vs references."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import moe_router as R

pytestmark = pytest.mark.gpu


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    assert torch.equal(a, b), (a != b).nonzero()[:8]


def _check(logits, k, shared, rsf, ep_rank, **kw):
    t, e = logits.shape
    un = kw.pop("unmapped_topk_idx", None)
    un_ref = None if un is None else un.clone()
    want_scores = kw.pop("scores", False)
    sc = torch.full((t, e), float("nan"), device="cuda") if want_scores else None
    sc_ref = torch.empty((t, e), device="cuda") if want_scores else None
    idx, w = kernelkiln.moe.moe_topk_gate_forward(logits, k, shared > 0, shared, rsf, ep_rank, unmapped_topk_idx=un,
                                                scores=sc, **kw)
    ridx, rw = R.moe_topk_gate_forward(logits, k, shared > 0, shared, rsf, ep_rank, unmapped_topk_idx=un_ref,
                                       scores=sc_ref, **kw)
    kernelkiln.check_errors()
    _same(idx, ridx)
    _same(w, rw)
    if un is not None:
        _same(un, un_ref)
    if want_scores:
        _same(sc, sc_ref)
    return idx, w


@pytest.mark.parametrize("e,k", [(256, 8), (64, 6), (128, 8), (384, 8), (128, 4), (252, 8), (256, 32)])
@pytest.mark.parametrize("t", [1, 7, 4001])
def test_matches_reference(seed, e, k, t):
    logits = torch.randn(t, e, device="cuda") * 3
    bias = torch.randn(e, device="cuda") * 0.1
    _check(logits, k, 0, 2.5, 0, bias=bias, scores=True)
    _check(logits, k, 0, 1.0, 0)


@pytest.mark.parametrize("shared", [1, 2])
def test_all_options_together(seed, shared):
    t, e, k, d = 4010, 256, 8, 33
    logits = torch.randn(t, e, device="cuda")
    bias = torch.randn(e, device="cuda") * 0.1
    image_bias = torch.randn(e, device="cuda") * 0.5
    image = torch.rand(t, device="cuda") > 0.5
    mask = torch.rand(t, device="cuda") > 0.1
    mask[-10:] = False
    rnd = torch.rand(t, device="cuda") > 0.8
    phys = torch.randint(0, e + d - 1, (e + shared, d), device="cuda", dtype=torch.int32)
    count = torch.randint(1, d + 1, (e + shared,), device="cuda", dtype=torch.int32)
    un = torch.full((t, k), 5, dtype=torch.int64, device="cuda")
    common = dict(mask=mask, bias=bias, image_bias=image_bias, image_token_mask=image, to_physical_map=phys,
                  logical_count=count, scores=True)
    _check(logits, k, shared, 1.5, 3, unmapped_topk_idx=un, force_random=rnd, **common)
    fixed = torch.rand(t, device="cuda") > 0.5
    un2 = un.clone()
    un2[::17, 3] = -1
    _check(logits, k, shared, 1.5, 3, unmapped_topk_idx=un2, fix_routing_mask=fixed, **common)


@pytest.mark.parametrize("with_map", [False, True])
def test_force_random_rows(seed, with_map):
    t, e = 2048, 256
    kw = {}
    if with_map:
        kw = dict(to_physical_map=torch.randint(0, 300, (e + 1, 4), device="cuda", dtype=torch.int32),
                  logical_count=torch.randint(1, 5, (e + 1,), device="cuda", dtype=torch.int32))
    idx, w = _check(torch.randn(t, e, device="cuda"), 8, 1, 2.5, 5, force_random=torch.ones(t, dtype=torch.bool,
                                                                                           device="cuda"), **kw)
    assert all(len(set(r)) == 9 for r in idx.tolist())
    assert ((w > 0) & (w <= 1)).all()


def test_constructed_ties(seed):
    idx, _ = _check(torch.zeros(64, 256, device="cuda"), 8, 0, 2.5, 0)
    assert (idx == torch.arange(8, device="cuda")).all()
    few = torch.randint(-2, 3, (4001, 256), device="cuda").float()
    _check(few, 8, 1, 2.5, 0, bias=torch.randint(-1, 2, (256,), device="cuda").float() * 0.25)


def test_unaligned_logits_and_out(seed):
    base = torch.randn(1001 * 256 + 1, device="cuda")
    logits = base[1:].view(1001, 256)
    _check(logits, 8, 0, 2.5, 0)
    out = (torch.full((1001, 9), 7, dtype=torch.int64, device="cuda"),
           torch.full((1001, 9), float("nan"), device="cuda"))
    res = kernelkiln.moe.moe_topk_gate_forward(logits, 8, True, 1, 2.5, 0, out=out)
    assert res[0] is out[0]
    ridx, rw = R.moe_topk_gate_forward(logits, 8, True, 1, 2.5, 0)
    _same(out[0], ridx)
    _same(out[1], rw)


def test_zero_tokens_and_all_masked():
    idx, w = kernelkiln.moe.moe_topk_gate_forward(torch.empty(0, 256, device="cuda"), 8, True, 1, 2.5, 0)
    assert idx.shape == (0, 9)
    logits = torch.randn(9, 256, device="cuda")
    mask = torch.zeros(9, dtype=torch.bool, device="cuda")
    un = torch.zeros(9, 8, dtype=torch.int64, device="cuda")
    idx, w = _check(logits, 8, 1, 2.5, 0, mask=mask, unmapped_topk_idx=un, scores=True)
    assert (idx == -1).all() and (w == 0).all() and (un == -1).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_raise_without_killing_the_context(seed, bad):
    logits = torch.randn(64, 256, device="cuda")
    logits[17, 100] = bad
    idx, _ = kernelkiln.moe.moe_topk_gate_forward(logits, 8, False, 0, 2.5, 0)
    with pytest.raises(kernelkiln.moe.NonFiniteScoresError, match="token 17"):
        kernelkiln.check_errors()
    assert (idx[17] == -1).all()
    _check(torch.randn(64, 256, device="cuda"), 8, 0, 2.5, 0)


def test_backward_and_aux_ops(seed):
    t, e, k = 4096, 256, 8
    logits = torch.randn(t, e, device="cuda")
    sc = torch.empty(t, e, device="cuda")
    idx, w = kernelkiln.moe.moe_topk_gate_forward(logits, k, False, 0, 2.5, 0, scores=sc)
    g = torch.randn(t, k, device="cuda")
    mask = torch.rand(t, device="cuda") > 0.2
    h = torch.randn(4, e, device="cuda")
    got = kernelkiln.moe.moe_topk_gate_backward(sc, idx, w, g, 2.5, mask=mask, grad_scores_sum=h)
    want = R.moe_topk_gate_backward(sc, idx, w, g, 2.5, mask=mask, grad_scores_sum=h)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    _same(kernelkiln.moe.group_count(idx, e), R.group_count(idx.cpu(), e).cuda())
    _same(kernelkiln.moe.aux_fi(idx, e, k), R.aux_fi(idx.cpu(), e, k).cuda())
    assert torch.equal(kernelkiln.moe.mask_indices_by_tp(idx, e, 8, 1, 2).cpu(), R.mask_indices_by_tp(idx.cpu(), e, 8, 1, 2))
    g8 = idx // 32
    kernelkiln.moe.inplace_unique_group_indices(g8, 8)
    ref = (idx // 32).cpu()
    R.inplace_unique_group_indices(ref, 8)
    assert torch.equal(g8.cpu(), ref)
