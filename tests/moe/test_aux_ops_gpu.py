"""The v1 auxiliary MoE kernels and the 2.1 router backward on the GPU.

group_count, aux_fi, mask_indices_by_tp and inplace_unique_group_indices are integer-exact: bit-identical to
kernelkiln.torch (run on CPU copies) for every shape, dtype and special id (-1, ids >= the bin count, negative
ids, repeats). moe_topk_gate_backward is deterministic but sums in a different order than torch: compared
within 1e-5 relative, and run to run bit for bit.
"""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import moe_router as R

pytestmark = pytest.mark.gpu
M = kernelkiln.moe


def _ids(t, k, hi, lo=-1):
    """Random ids in [lo, hi): -1 (and below) for padding, everything else a candidate id."""
    return torch.randint(lo, hi, (t, k), device="cuda")


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    assert torch.equal(a.cpu(), b.cpu()), (a.cpu() != b.cpu()).nonzero()[:8]


# ---------------------------------------------------------------------------------------------
# group_count / aux_fi

@pytest.mark.parametrize("bins", [1, 8, 72, 256, 4096, 4097, 20000])
@pytest.mark.parametrize("t,k", [(1, 1), (5, 8), (4001, 6), (16384, 8), (70000, 9)])
def test_group_count_and_aux_fi_match_reference(seed, t, k, bins):
    ids = _ids(t, k, bins + 3, lo=-3)  # ids >= bins and < -1 are ignored like -1
    _same(M.group_count(ids, bins), R.group_count(ids.cpu(), bins))
    for aux_topk in (1, k, 3 * k):
        _same(M.aux_fi(ids, bins, aux_topk), R.aux_fi(ids.cpu(), bins, aux_topk))


def test_histograms_strided_rows_one_bin_and_empty(seed):
    base = _ids(3000, 16, 300)
    ids = base[:, 3:11]  # row stride 16, inner stride 1
    _same(M.group_count(ids, 256), R.group_count(ids.cpu(), 256))
    _same(M.aux_fi(ids, 256, 8), R.aux_fi(ids.cpu(), 256, 8))
    every_token_to_one = torch.full((9999, 8), 7, device="cuda")
    assert M.group_count(every_token_to_one, 256)[7].item() == 9999 * 8
    _same(M.aux_fi(every_token_to_one, 256, 8), R.aux_fi(every_token_to_one.cpu(), 256, 8))
    all_masked = torch.full((100, 8), -1, device="cuda")
    assert M.group_count(all_masked, 256).eq(0).all() and M.aux_fi(all_masked, 256, 8).eq(0).all()
    empty = torch.empty(0, 8, dtype=torch.int64, device="cuda")
    _same(M.group_count(empty, 256), torch.zeros(256, dtype=torch.int32))
    _same(M.aux_fi(empty, 256, 8), torch.zeros(256))


def test_histograms_are_graph_capturable_and_repeatable(seed):
    ids = _ids(16384, 8, 256)
    kernelkiln.preload(["id_histogram"])
    first = M.aux_fi(ids, 256, 8)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        counts = M.group_count(ids, 256)
        freq = M.aux_fi(ids, 256, 8)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        _same(freq, first)
        _same(counts, R.group_count(ids.cpu(), 256))


# ---------------------------------------------------------------------------------------------
# mask_indices_by_tp

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
@pytest.mark.parametrize("n,ep,tp", [(256, 8, 2), (256, 16, 4), (64, 8, 8), (96, 4, 1), (120, 8, 2)])
def test_mask_indices_by_tp_matches_reference(seed, dtype, n, ep, tp):
    lo = 0 if dtype == torch.uint8 else -1
    ids = _ids(4001, 8, n, lo=lo).to(dtype)
    for tp_rank in range(tp):
        got = M.mask_indices_by_tp(ids, n, ep, tp_rank, tp)
        _same(got, R.mask_indices_by_tp(ids.cpu(), n, ep, tp_rank, tp))


def test_mask_indices_by_tp_strided_and_empty(seed):
    base = _ids(777, 12, 256)
    ids = base[:, 2:10]
    _same(M.mask_indices_by_tp(ids, 256, 8, 1, 2), R.mask_indices_by_tp(ids.cpu(), 256, 8, 1, 2))
    assert M.mask_indices_by_tp(torch.empty(0, 8, dtype=torch.int64, device="cuda"), 256, 8, 0, 2).shape == (0, 8)


# ---------------------------------------------------------------------------------------------
# inplace_unique_group_indices

@pytest.mark.parametrize("k", [1, 2, 4, 6, 7, 8, 9, 16, 31, 32])
@pytest.mark.parametrize("groups", [8, 16, 72, 128])
def test_inplace_unique_group_indices_matches_reference(seed, k, groups):
    ids = _ids(3001, k, groups)
    want = ids.cpu()
    R.inplace_unique_group_indices(want, groups)
    assert M.inplace_unique_group_indices(ids, groups) is None
    _same(ids, want)


def test_inplace_unique_group_indices_strided_constructed_rows(seed):
    base = _ids(1000, 12, 8)
    base[0, 2:10] = 5  # one id eight times: the first stays
    base[1, 2:10] = -1
    base[2, 2:10] = torch.tensor([3, -1, 3, -1, 4, 4, 3, 0])
    view = base[:, 2:10]
    want = view.cpu()
    R.inplace_unique_group_indices(want, 8)
    untouched = base[:, :2].clone(), base[:, 10:].clone()
    M.inplace_unique_group_indices(view, 8)
    _same(view, want)
    assert view[0].tolist() == [5] + [-1] * 7
    assert view[2].tolist() == [3, -1, -1, -1, 4, -1, -1, 0]
    _same(base[:, :2], untouched[0])
    _same(base[:, 10:], untouched[1])
    M.inplace_unique_group_indices(torch.empty(0, 8, dtype=torch.int64, device="cuda"), 8)


# ---------------------------------------------------------------------------------------------
# moe_topk_gate_backward

def _router(t, e, k, **kw):
    logits = torch.randn(t, e, device="cuda")
    scores = torch.empty(t, e, device="cuda")
    idx, w = M.moe_topk_gate_forward(logits, k, False, 0, 2.5, 0, scores=scores, **kw)
    return scores, idx, w


@pytest.mark.parametrize("e,k", [(64, 6), (128, 8), (256, 8), (256, 1), (384, 8), (256, 32)])
@pytest.mark.parametrize("t", [1, 37, 4096])
@pytest.mark.parametrize("aux", [False, True])
def test_backward_matches_reference(seed, t, e, k, aux):
    scores, idx, w = _router(t, e, k)
    g = torch.randn(t, k, device="cuda")
    kw = {}
    if aux:
        q = 1 if t == 37 else t if t == 1 else 4
        kw = dict(mask=torch.rand(t, device="cuda") > 0.2, grad_scores_sum=torch.randn(q, e, device="cuda"))
    got = M.moe_topk_gate_backward(scores, idx, w, g, 2.5, **kw)
    want = R.moe_topk_gate_backward(scores, idx, w, g, 2.5, **kw)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    again = M.moe_topk_gate_backward(scores, idx, w, g, 2.5, **kw)
    _same(got, again)


def test_backward_fixed_routing_duplicates_padding_and_out(seed):
    t, e, k = 2000, 256, 8
    scores, _, w = _router(t, e, k)
    idx = torch.randint(0, e, (t, k), device="cuda")
    idx[::3, 1] = idx[::3, 0]  # fixed routing may repeat an expert: its terms accumulate
    idx[::5, 4:] = -1
    idx[7, :] = -1
    idx[11, 2] = e + 5  # outside [0, E): skipped like -1
    g = torch.randn(t, k, device="cuda")
    out = torch.full((t, e), float("nan"), device="cuda")
    got = M.moe_topk_gate_backward(scores, idx, w, g, 2.5, out=out)
    assert got.data_ptr() == out.data_ptr()
    ref_idx = idx.clone()
    ref_idx[11, 2] = -1
    want = R.moe_topk_gate_backward(scores, ref_idx, w, g, 2.5)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    assert out[7].eq(0).all()


@pytest.mark.parametrize("e", [250, 125])  # rows not a multiple of 4 floats: the scalar path (epl 8 and 4)
def test_backward_odd_expert_counts(seed, e):
    t, k = 300, 8
    scores = torch.rand(t, e, device="cuda") + 0.05
    idx = torch.rand(t, e, device="cuda").topk(k).indices
    w, g = torch.rand(t, k, device="cuda"), torch.randn(t, k, device="cuda")
    mask, h = torch.rand(t, device="cuda") > 0.5, torch.randn(3, e, device="cuda")
    got = M.moe_topk_gate_backward(scores, idx, w, g, 2.5, mask=mask, grad_scores_sum=h)
    want = R.moe_topk_gate_backward(scores, idx, w, g, 2.5, mask=mask, grad_scores_sum=h)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_backward_zero_tokens_and_contiguity_errors(seed):
    e = 256
    empty = M.moe_topk_gate_backward(torch.empty(0, e, device="cuda"), torch.empty(0, 8, dtype=torch.int64,
                                     device="cuda"), torch.empty(0, 8, device="cuda"),
                                     torch.empty(0, 8, device="cuda"), 2.5)
    assert empty.shape == (0, e)
    scores, idx, w = _router(64, e, 8)
    g = torch.randn(8, 64, device="cuda").t()
    with pytest.raises(ValueError, match="grad_topk_weights must be contiguous"):
        M.moe_topk_gate_backward(scores, idx, w, g, 2.5)
