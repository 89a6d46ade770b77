"""topk_gate on an Ascend NPU: the same indices as the stable reference, bit for bit (ties to the smaller index,
-0.0 tying +0.0), and the non-finite flag.

Runs only where torch_npu, the CANN runtime, an Ascend 950 and a store with Ascend binaries exist (CI's ascend job,
`pytest -m npu`); everywhere else it skips with the reason (tests/conftest.py)."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import stable_topk

pytestmark = pytest.mark.npu


@pytest.mark.parametrize("experts,topk", [(8, 2), (16, 6), (36, 6), (64, 8), (65, 8), (72, 6), (128, 8), (160, 8),
                                          (256, 8), (256, 1), (256, 32), (384, 8), (448, 16), (512, 32)])
@pytest.mark.parametrize("tokens", [1, 7, 4001])
def test_topk_matches_stable_reference(seed, experts, topk, tokens):
    for _ in range(2):
        scores = torch.randn(tokens, experts)
        idx = kernelkiln.moe.topk_gate(scores.npu(), topk)
        assert idx.device.type == "npu" and idx.dtype == torch.int64 and idx.shape == (tokens, topk)
        assert torch.equal(idx.cpu(), stable_topk(scores, topk))


@pytest.mark.parametrize("experts", [64, 256, 300])
def test_ties_go_to_the_smaller_index(seed, experts):
    scores = torch.randint(-3, 4, (2048, experts)).float()
    scores[:, ::7] = -0.0
    assert torch.equal(kernelkiln.moe.topk_gate(scores.npu(), 8).cpu(), stable_topk(scores, 8))


def test_zero_tokens():
    assert kernelkiln.moe.topk_gate(torch.empty(0, 256).npu(), 8).shape == (0, 8)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scores_raise(seed, bad):
    scores = torch.randn(64, 256)
    scores[17, 100] = bad
    idx = kernelkiln.moe.topk_gate(scores.npu(), 8)
    with pytest.raises(kernelkiln.moe.NonFiniteScoresError, match="token 17"):
        kernelkiln.check_errors()
    assert (idx.cpu()[17] == -1).all()
    good = torch.randn(64, 256)
    assert torch.equal(kernelkiln.moe.topk_gate(good.npu(), 8).cpu(), stable_topk(good, 8))
    kernelkiln.check_errors()
