"""top2_sum_gate on the GPU: bit-identical indices and weights to kernelkiln.torch.top2_sum_gate.

The reference runs on the same GPU tensors, so sigmoid / softplus use torch's CUDA
formulas, which the kernel reproduces (expf, log1pf, sqrtf, IEEE division).
"""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import top2_sum_gate as ref_gate

pytestmark = pytest.mark.gpu


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype == torch.float32:
        a, b = a.view(torch.int32), b.view(torch.int32)
    assert torch.equal(a, b)


def _check(logits, bias, *args, **kw):
    un = kw.pop("unmapped_topk_idx", None)
    un_ref = None if un is None else un.clone()
    idx, w = kernelkiln.moe.top2_sum_gate(logits, bias, *args, unmapped_topk_idx=un, **kw)
    ref_idx, ref_w = ref_gate(logits, bias, *args, unmapped_topk_idx=un_ref, **kw)
    _same(idx, ref_idx)
    _same(w, ref_w)
    if un is not None:
        _same(un, un_ref)
    return idx, w


@pytest.mark.parametrize("scoring", ["sigmoid", "sqrtsoftplus"])
@pytest.mark.parametrize("e,g,gk,k", [(256, 8, 4, 8), (256, 8, 8, 8), (256, 0, 0, 8), (256, 16, 3, 6),
                                      (128, 8, 4, 8), (64, 8, 2, 6), (160, 8, 4, 8), (150, 0, 0, 6), (100, 0, 0, 6),
                                      (384, 0, 0, 8), (62, 0, 0, 6)])
@pytest.mark.parametrize("t", [1, 7, 4001])
def test_matches_reference(seed, scoring, e, g, gk, k, t):
    logits = torch.randn(t, e, device="cuda") * 3
    bias = torch.randn(e, device="cuda") * 0.1
    _check(logits, bias, k, gk, g, False, 0, 2.5, 0, 1, 0, 1, scoring)


@pytest.mark.parametrize("shared", [1, 2])
def test_all_options_together(seed, shared):
    t, e, k, d = 4010, 256, 8, 33  # 32 extra duplicate slots, as the v1 tests
    logits = torch.randn(t, e, device="cuda")
    bias = torch.randn(e, device="cuda") * 0.1
    mask = torch.rand(t, device="cuda") > 0.1
    mask[-10:] = False  # padded tail
    phys = torch.randint(0, e + d - 1, (e + shared, d), device="cuda", dtype=torch.int32)
    count = torch.randint(1, d + 1, (e + shared,), device="cuda", dtype=torch.int32)
    for tp_rank in (0, 1):
        un = torch.full((t, k), 5, dtype=torch.int64, device="cuda")
        _check(logits, bias, k, 4, 8, True, shared, 1.5, 0, 4, tp_rank, 2, "sigmoid", mask=mask,
               to_physical_map=phys, logical_count=count, unmapped_topk_idx=un)
        # fixed routing reuses (and keeps) the unmapped experts of the first call
        fixed = torch.rand(t, device="cuda") > 0.5
        un2 = un.clone()
        un2[::17, 3] = -1
        _check(logits, bias, k, 4, 8, True, shared, 1.5, 0, 4, tp_rank, 2, "sigmoid", mask=mask,
               fix_routing_mask=fixed, to_physical_map=phys, logical_count=count, unmapped_topk_idx=un2)


def test_ties_all_equal_and_one_group(seed):
    e = 256
    logits = torch.zeros(64, e, device="cuda")  # all scores equal: groups 0..3, experts 0..7
    idx, _ = _check(logits, torch.zeros(e, device="cuda"), 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid")
    assert (idx == torch.arange(8, device="cuda")).all()
    few = torch.randint(-2, 3, (4001, e), device="cuda").float()  # many exact ties everywhere
    _check(few, torch.zeros(e, device="cuda"), 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid")
    one = torch.randn(4001, e, device="cuda") - 10
    one[:, 96:128] += 20  # every token's best experts in group 3
    idx, _ = _check(one, torch.zeros(e, device="cuda"), 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sqrtsoftplus")
    assert ((idx >= 96) & (idx < 128)).all()


def test_unaligned_logits_use_scalar_loads(seed):
    base = torch.randn(1001 * 256 + 1, device="cuda")
    logits = base[1:].view(1001, 256)
    _check(logits, torch.zeros(256, device="cuda"), 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid")


def test_zero_tokens_and_all_masked():
    idx, w = kernelkiln.moe.top2_sum_gate(torch.empty(0, 256, device="cuda"), torch.zeros(256, device="cuda"), 8, 4,
                                        8, True, 1, 2.5, 0, 1, 0, 1, "sigmoid")
    assert idx.shape == (0, 9) and w.shape == (0, 9)
    logits = torch.randn(9, 256, device="cuda")
    mask = torch.zeros(9, dtype=torch.bool, device="cuda")
    un = torch.zeros(9, 8, dtype=torch.int64, device="cuda")
    idx, w = _check(logits, torch.zeros(256, device="cuda"), 8, 4, 8, True, 1, 2.5, 0, 1, 0, 1, "sigmoid",
                    mask=mask, unmapped_topk_idx=un)
    assert (idx == -1).all() and (w == 0).all() and (un == -1).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_raise_without_killing_the_context(seed, bad):
    logits = torch.randn(64, 256, device="cuda")
    logits[17, 100] = bad
    bias = torch.zeros(256, device="cuda")
    idx, _ = kernelkiln.moe.top2_sum_gate(logits, bias, 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid")
    with pytest.raises(kernelkiln.moe.NonFiniteScoresError, match="token 17"):
        kernelkiln.check_errors()
    assert (idx[17] == -1).all()
    good = torch.randn(64, 256, device="cuda")
    _check(good, bias, 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid")
    kernelkiln.check_errors()


@pytest.mark.parametrize("scoring", ["sigmoid", "sqrtsoftplus"])
def test_without_group_compaction(seed, scoring, monkeypatch):
    """The kernel keeps a non-compacted path (kept groups not packed); it stays bit-exact too."""
    from kernelkiln.moe import _top2_sum
    monkeypatch.setattr(_top2_sum, "USE_COMPACTION", False)
    logits = torch.randn(4001, 256, device="cuda") * 3
    bias = torch.randn(256, device="cuda") * 0.1
    _check(logits, bias, 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, scoring)
