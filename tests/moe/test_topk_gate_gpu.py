"""topk_gate on the GPU: bit-identical indices to the stable reference, ties, errors."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import stable_topk

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("experts,topk", [(8, 2), (16, 6), (36, 6), (72, 6), (128, 8), (144, 6), (160, 8),
                                          (256, 8), (256, 1), (256, 32), (384, 8), (512, 32), (33, 33 - 1)])
@pytest.mark.parametrize("tokens", [1, 7, 4001])
def test_topk_matches_stable_reference(seed, experts, topk, tokens):
    for _ in range(2):  # validated path, then the cached launch plan
        scores = torch.randn(tokens, experts, device="cuda")
        idx = kernelkiln.moe.topk_gate(scores, topk)
        assert idx.dtype == torch.int64 and idx.shape == (tokens, topk) and idx.is_contiguous()
        assert torch.equal(idx, stable_topk(scores, topk))


def test_unaligned_rows_use_scalar_loads(seed):
    base = torch.randn(4001 * 256 + 1, device="cuda")
    scores = base[1:].view(4001, 256)  # 4-byte offset: no float4 loads possible
    for _ in range(2):
        assert torch.equal(kernelkiln.moe.topk_gate(scores, 8), stable_topk(scores, 8))


@pytest.mark.parametrize("experts", [64, 256, 300])
def test_ties_go_to_the_smaller_index(seed, experts):
    # Few distinct values: every row has many exact ties, including +0.0 vs -0.0.
    scores = torch.randint(-3, 4, (2048, experts), device="cuda").float()
    scores[:, ::7] = -0.0
    idx = kernelkiln.moe.topk_gate(scores, 8)
    assert torch.equal(idx, stable_topk(scores, 8))


def test_launch_plan_is_keyed_on_dtype(seed):
    """A plan made for fp32 scores must not take bf16 scores of the same shape: they get the dtype error."""
    scores = torch.randn(64, 256, device="cuda")
    for _ in range(2):
        assert torch.equal(kernelkiln.moe.topk_gate(scores, 8), stable_topk(scores, 8))
    with pytest.raises(TypeError, match="scores"):
        kernelkiln.moe.topk_gate(scores.to(torch.bfloat16), 8)


def test_topk_equals_expert_count(seed):
    scores = torch.randn(100, 24, device="cuda")
    assert torch.equal(kernelkiln.moe.topk_gate(scores, 24), stable_topk(scores, 24))


def test_zero_tokens():
    assert kernelkiln.moe.topk_gate(torch.empty(0, 256, device="cuda"), 8).shape == (0, 8)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scores_raise_without_killing_the_context(seed, bad):
    scores = torch.randn(64, 256, device="cuda")
    scores[17, 100] = bad
    idx = kernelkiln.moe.topk_gate(scores, 8)
    with pytest.raises(kernelkiln.moe.NonFiniteScoresError, match="token 17"):
        kernelkiln.check_errors()
    assert (idx[17] == -1).all()
    good = torch.randn(64, 256, device="cuda")  # the context still works
    assert torch.equal(kernelkiln.moe.topk_gate(good, 8), stable_topk(good, 8))
    kernelkiln.check_errors()  # nothing pending any more


def test_non_finite_raises_on_next_call(seed):
    scores = torch.randn(8, 256, device="cuda")
    scores[3, 0] = float("nan")
    kernelkiln.moe.topk_gate(scores, 8)
    torch.cuda.synchronize()
    with pytest.raises(kernelkiln.moe.NonFiniteScoresError):
        kernelkiln.moe.topk_gate(torch.randn(8, 256, device="cuda"), 8)
