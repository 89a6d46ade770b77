"""Argument errors of moe_topk_gate_forward/backward and the v1 aux ops: raised before device work (no GPU)."""
import pytest
import torch

import kernelkiln

E = 256


def _gate(logits=None, **kw):
    args = dict(num_topk=8, use_shared_as_routed=False, num_shared_experts=0, routed_scaling_factor=2.5, ep_rank=0)
    args.update(kw)
    return kernelkiln.moe.moe_topk_gate_forward(torch.randn(4, E) if logits is None else logits, **args)


@pytest.mark.parametrize("kw,match", [
    (dict(scoring_func="sigmoid"), "scoring_func must be 'sqrtsoftplus'"),
    (dict(num_topk=0), "num_topk must be in 1..32"),
    (dict(num_topk=32, use_shared_as_routed=True, num_shared_experts=1), "num_topk must be in 1..31"),
    (dict(use_shared_as_routed=True, num_shared_experts=3), "num_shared_experts must be 1 or 2"),
    (dict(use_shared_as_routed=1), "use_shared_as_routed must be a bool"),
    (dict(routed_scaling_factor="2"), "routed_scaling_factor must be a float"),
    (dict(ep_rank=-1), "ep_rank must be in"),
    (dict(mask=torch.ones(5, dtype=torch.bool)), r"mask must have shape \[4\]"),
    (dict(force_random=torch.ones(4, dtype=torch.int32)), "force_random has dtype"),
    (dict(bias=torch.zeros(E + 1)), r"bias must be a contiguous \[256\]"),
    (dict(image_bias=torch.zeros(E)), "image_bias and image_token_mask must be given together"),
    (dict(fix_routing_mask=torch.ones(4, dtype=torch.bool)), "fix_routing_mask needs unmapped_topk_idx"),
    (dict(unmapped_topk_idx=torch.zeros(4, 6, dtype=torch.int64)), r"unmapped_topk_idx must be \[4, 8\]"),
    (dict(to_physical_map=torch.zeros(E, 2, dtype=torch.int32)), "must be given together"),
    (dict(to_physical_map=torch.zeros(E + 1, 2, dtype=torch.int32), logical_count=torch.ones(E + 1, dtype=torch.int32)),
     "to_physical_map must be a contiguous"),
    (dict(scores=torch.zeros(4, E - 4)), r"scores must be a contiguous \[4, 256\]"),
    (dict(out=torch.zeros(4, 8)), "out must be a"),
])
def test_forward_bad_options(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _gate(**kw)


def test_forward_bad_logits():
    with pytest.raises(TypeError, match="logits has dtype torch.bfloat16"):
        _gate(torch.randn(4, E, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="multiple of 4"):
        _gate(torch.randn(4, 66))
    with pytest.raises(ValueError, match="CUDA tensor"):
        _gate()


def test_alias_and_zero_tokens():
    idx, w = kernelkiln.moe.moe_topk_gate(torch.empty(0, E), 8, True, 1, 2.5, 0)
    assert idx.shape == (0, 9) and idx.dtype == torch.int64 and w.dtype == torch.float32


def test_backward_checks():
    s = torch.rand(8, 64) + 0.1
    idx = torch.randint(0, 64, (8, 4))
    w, g = torch.rand(8, 4), torch.randn(8, 4)
    with pytest.raises(ValueError, match="must be given together"):
        kernelkiln.moe.moe_topk_gate_backward(s, idx, w, g, 2.5, mask=torch.ones(8, dtype=torch.bool))
    with pytest.raises(ValueError, match="T \\(8\\) % Q == 0"):
        kernelkiln.moe.moe_topk_gate_backward(s, idx, w, g, 2.5, mask=torch.ones(8, dtype=torch.bool),
                                            grad_scores_sum=torch.zeros(3, 64))
    with pytest.raises(ValueError, match=r"grad_topk_weights must be \[8, 4\]"):
        kernelkiln.moe.moe_topk_gate_backward(s, idx, w, g[:, :3], 2.5)
    with pytest.raises(ValueError, match="topk_weights must be contiguous"):
        kernelkiln.moe.moe_topk_gate_backward(s, idx, torch.rand(4, 8).t(), g, 2.5)
    with pytest.raises(ValueError, match=r"experts\) must be in 1..512"):
        kernelkiln.moe.moe_topk_gate_backward(torch.rand(8, 513), idx, w, g, 2.5)
    with pytest.raises(ValueError, match="CUDA tensor"):
        kernelkiln.moe.moe_topk_gate_backward(s, idx, w, g, 2.5)
    assert kernelkiln.moe.moe_topk_gate_backward(s[:0], idx[:0], w[:0], g[:0], 2.5).shape == (0, 64)


def test_aux_ops_checks():
    idx = torch.tensor([[0, 1, 1, -1], [3, 3, 3, 0]])
    for call in (lambda: kernelkiln.moe.group_count(idx, 5), lambda: kernelkiln.moe.aux_fi(idx, 4, 2),
                 lambda: kernelkiln.moe.mask_indices_by_tp(idx, 32, 4, 1, 2),
                 lambda: kernelkiln.moe.inplace_unique_group_indices(idx, 8)):
        with pytest.raises(ValueError, match="CUDA tensor"):
            call()
    with pytest.raises(TypeError, match="group_idx has dtype torch.int32"):
        kernelkiln.moe.group_count(idx.int(), 5)
    with pytest.raises(ValueError, match="num_groups must be in 1..128"):
        kernelkiln.moe.inplace_unique_group_indices(idx, 129)
    with pytest.raises(ValueError, match="tp_rank must be in 0..1"):
        kernelkiln.moe.mask_indices_by_tp(idx, 32, 4, 2, 2)
    with pytest.raises(ValueError, match=r"group_indices.shape\[1\] must be at most 32"):
        kernelkiln.moe.inplace_unique_group_indices(torch.zeros(2, 33, dtype=torch.int64), 8)
    with pytest.raises(ValueError, match="inner stride 1"):
        kernelkiln.moe.group_count(torch.zeros(8, 4, dtype=torch.int64).t(), 8)
    assert kernelkiln.moe.group_count(idx[:0], 5).tolist() == [0] * 5
    assert kernelkiln.moe.aux_fi(idx[:0], 4, 2).tolist() == [0.0] * 4
