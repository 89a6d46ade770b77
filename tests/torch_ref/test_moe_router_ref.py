"""CPU tests of the router references: top2_sum_gate, topk_sum_and_topk_group_idx, normalize_weight.

The references are checked against slow per-token loops written from the spec
(docs/SPEC.md §2.3, §3.1), on random inputs and on constructed ties.
"""
import pytest
import torch

from kernelkiln.torch import normalize_weight, top2_sum_gate, topk_sum_and_topk_group_idx


def _rank_desc(values, ids):
    """ids sorted by descending value, ties to the smaller id."""
    return sorted(ids, key=lambda i: (-values[i], i))


def _loop_router(logits, bias, k, gk, g, s_count, rsf, ep_rank, ep, tp_rank, tp, scoring, mask=None,
                 phys=None, count=None):
    t, e = logits.shape
    scores = torch.sigmoid(logits) if scoring == "sigmoid" else torch.nn.functional.softplus(logits).sqrt()
    biased = scores + bias
    d = phys.shape[1] if phys is not None else 1
    per_rank = (e + d - 1) // ep
    idx_out, w_out = [], []
    for r in range(t):
        if mask is not None and not mask[r]:
            idx_out.append([-1] * (k + s_count))
            w_out.append([0.0] * (k + s_count))
            continue
        b = biased[r].tolist()
        allowed = list(range(e))
        if g and g != gk:
            per = e // g
            gscore = {}
            for grp in range(g):
                top2 = sorted(biased[r, grp * per:(grp + 1) * per].tolist(), reverse=True)[:2]
                gscore[grp] = float(torch.tensor(top2[0], dtype=torch.float32) + torch.tensor(top2[1]))
            keep = set(_rank_desc(gscore, list(range(g)))[:gk])
            allowed = [i for i in range(e) if i // per in keep]
        chosen = _rank_desc(b, allowed)[:k]
        den = torch.tensor(1e-20, dtype=torch.float32)
        for i in chosen:
            den = den + scores[r, i]
        ws = [float(scores[r, i] / den * torch.tensor(rsf, dtype=torch.float32)) for i in chosen]
        ids = chosen + [e + j for j in range(s_count)]
        ws = ws + [1.0] * s_count
        if phys is not None:
            ids = [int(phys[i, (ep_rank + r * 23333) % int(count[i])]) for i in ids]
        out = []
        for i in ids:
            if (i // per_rank) % tp != tp_rank:
                out.append(-1)
            else:
                v = i - tp_rank * per_rank
                out.append(v - v // (per_rank * tp) * (per_rank * tp - per_rank))
        idx_out.append(out)
        w_out.append(ws)
    return torch.tensor(idx_out, dtype=torch.int64), torch.tensor(w_out, dtype=torch.float32)


@pytest.mark.parametrize("scoring", ["sigmoid", "sqrtsoftplus"])
@pytest.mark.parametrize("e,g,gk,k", [(256, 8, 4, 8), (64, 8, 2, 6), (32, 0, 0, 6), (64, 4, 4, 8)])
def test_top2_sum_gate_matches_loop(seed, scoring, e, g, gk, k):
    logits = torch.randn(37, e)
    bias = torch.randn(e) * 0.1
    idx, w = top2_sum_gate(logits, bias, k, gk, g, False, 0, 2.5, 0, 1, 0, 1, scoring)
    ref_idx, ref_w = _loop_router(logits, bias, k, gk, g, 0, 2.5, 0, 1, 0, 1, scoring)
    assert torch.equal(idx, ref_idx)
    assert torch.equal(w.view(torch.int32), ref_w.view(torch.int32))


def test_top2_sum_gate_ties_go_to_smaller_index_and_group():
    e, g = 64, 8
    logits = torch.zeros(3, e)  # every score equal: groups 0..3, experts 0..7 of them
    logits[1, 40:48] = 5.0  # group 5 strictly best, then ties among the rest by group id
    logits[2, ::9] = 3.0  # equal maxima in several groups
    bias = torch.zeros(e)
    idx, w = top2_sum_gate(logits, bias, 8, 4, g, False, 0, 1.0, 0, 1, 0, 1, "sigmoid")
    ref_idx, ref_w = _loop_router(logits, bias, 8, 4, g, 0, 1.0, 0, 1, 0, 1, "sigmoid")
    assert idx[0].tolist() == list(range(8))
    assert idx[1].tolist() == list(range(40, 48))
    assert torch.equal(idx, ref_idx) and torch.equal(w, ref_w)


def test_top2_sum_gate_shared_physical_map_and_tp_mask(seed):
    t, e, k, s = 23, 32, 6, 2
    logits = torch.randn(t, e)
    bias = torch.randn(e)
    d = 4
    phys = torch.randperm((e + s) * d).view(e + s, d).remainder(e + d - 1).int()
    count = torch.randint(1, d + 1, (e + s,), dtype=torch.int32)
    mask = torch.rand(t) > 0.3
    unmapped = torch.full((t, k), 7, dtype=torch.int64)
    idx, w = top2_sum_gate(logits, bias, k, 0, 0, True, s, 1.5, 1, 4, 1, 2, "sqrtsoftplus", mask=mask,
                           to_physical_map=phys, logical_count=count, unmapped_topk_idx=unmapped)
    ref_idx, ref_w = _loop_router(logits, bias, k, 0, 0, s, 1.5, 1, 4, 1, 2, "sqrtsoftplus", mask=mask, phys=phys,
                                  count=count)
    assert torch.equal(idx, ref_idx) and torch.equal(w, ref_w)
    assert (unmapped[~mask] == -1).all() and (unmapped[mask] < e).all()


def test_top2_sum_gate_fixed_rows_reuse_unmapped(seed):
    t, e, k = 5, 32, 4
    logits, bias = torch.randn(t, e), torch.zeros(e)
    unmapped = torch.tensor([[3, 1, -1, 31]] * t)
    fixed = torch.tensor([True, False, True, False, False])
    idx, w = top2_sum_gate(logits, bias, k, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "sigmoid",
                           fix_routing_mask=fixed, unmapped_topk_idx=unmapped)
    assert idx[0].tolist() == [3, 1, -1, 31] and w[0, 2] == 0
    s = torch.sigmoid(logits[0, [3, 1, 31]])
    den = torch.tensor(1e-20) + s[0] + s[1] + torch.tensor(0.0) + s[2]
    assert w[0, 0] == s[0] / den
    assert unmapped[0].tolist() == [3, 1, -1, 31] and unmapped[1].tolist() == idx[1].tolist()


def test_top2_sum_gate_rejects_non_finite():
    logits = torch.randn(4, 32)
    logits[2, 3] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        top2_sum_gate(logits, torch.zeros(32), 4, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "sigmoid")
    mask = torch.tensor([True, True, False, True])  # a masked token may hold anything
    top2_sum_gate(logits, torch.zeros(32), 4, 0, 0, False, 0, 1.0, 0, 1, 0, 1, "sigmoid", mask=mask)


def test_topk_sum_and_topk_group_idx_ties():
    scores = torch.tensor([[[1.0, 2.0], [2.0, 1.0], [0.0, 3.0], [3.0, 3.0]]])
    assert topk_sum_and_topk_group_idx(scores, 2, 3).tolist() == [[3, 0, 1]]
    assert topk_sum_and_topk_group_idx(scores, 1, 2).tolist() == [[2, 3]]


def test_normalize_weight_butterfly_order_matters():
    # Sequential and butterfly sums of these differ in fp32; the reference must use the butterfly.
    w = torch.tensor([[1.0, 2.0 ** -24, 2.0 ** -24, 2.0 ** -24, 0, 0, 0, 0, 2.0 ** -24]], dtype=torch.float32)
    den, out = normalize_weight(w)
    lanes = [0.0] * 32
    for i, v in enumerate(w[0].tolist()):
        lanes[i] = v
    lanes = [torch.tensor(v, dtype=torch.float32) for v in lanes]
    for off in (16, 8, 4, 2, 1):
        lanes = [lanes[i] + lanes[i ^ off] for i in range(32)]
    assert den[0] == lanes[0] + torch.tensor(1e-20, dtype=torch.float32)
    assert torch.equal(out, w / den[:, None])
