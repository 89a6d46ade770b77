"""Argument errors of normalize_weight and top2_sum_gate: raised before any device work (no GPU needed)."""
import pytest
import torch

import kernelkiln

E = 256


def _gate(logits=None, bias=None, **kw):
    args = dict(num_topk=8, num_topk_groups=4, num_groups=8, use_shared_as_routed=False, num_shared_experts=0,
                routed_scaling_factor=2.5, ep_rank=0, num_ep_ranks=1, tp_rank=0, num_tp_ranks=1,
                scoring_func="sigmoid")
    args.update(kw)
    logits = torch.randn(4, E) if logits is None else logits
    bias = torch.zeros(E) if bias is None else bias
    return kernelkiln.moe.top2_sum_gate(logits, bias, **args)


@pytest.mark.parametrize("kw,match", [
    (dict(scoring_func="softmax"), "scoring_func must be one of .*softmax scoring is not implemented"),
    (dict(scoring_func="identity"), "scoring_func must be one of"),
    (dict(num_topk=0), "num_topk must be in 1..32"),
    (dict(num_topk=33), "num_topk must be in"),
    (dict(num_groups=8, num_topk_groups=0), "num_topk_groups must be in|both be 0"),
    (dict(num_groups=0, num_topk_groups=0, num_topk=40), "num_topk must be in"),
    (dict(num_groups=7, num_topk_groups=4), "multiple of num_groups"),
    (dict(num_groups=8, num_topk_groups=9), "num_topk_groups must be in 0..8"),
    (dict(num_groups=8, num_topk_groups=1, num_topk=40), "num_topk must be in"),
    (dict(num_groups=16, num_topk_groups=1, num_topk=20), "exceeds the experts"),
    (dict(use_shared_as_routed=True, num_shared_experts=3), "num_shared_experts must be 1 or 2"),
    (dict(use_shared_as_routed=True, num_shared_experts=2, num_topk=7), "multiple of num_shared_experts"),
    (dict(use_shared_as_routed=1), "use_shared_as_routed must be a bool"),
    (dict(ep_rank=4, num_ep_ranks=4), "ep_rank must be in 0..3"),
    (dict(tp_rank=-1), "tp_rank must be in"),
    (dict(routed_scaling_factor="2.5"), "routed_scaling_factor must be a float"),
    (dict(num_topk=8.0), "num_topk must be an int"),
    (dict(mask=torch.ones(5, dtype=torch.bool)), r"mask must have shape \[4\]"),
    (dict(mask=torch.ones(4, dtype=torch.int32)), "mask has dtype torch.int32"),
    (dict(fix_routing_mask=torch.ones(4, dtype=torch.bool)), "fix_routing_mask needs unmapped_topk_idx"),
    (dict(unmapped_topk_idx=torch.zeros(4, 6, dtype=torch.int64)), r"unmapped_topk_idx must be \[4, 8\]"),
    (dict(unmapped_topk_idx=torch.zeros(4, 8, dtype=torch.int32)), "unmapped_topk_idx has dtype"),
    (dict(to_physical_map=torch.zeros(E, 2, dtype=torch.int32)), "must be given together"),
    (dict(to_physical_map=torch.zeros(E, 2, dtype=torch.int32), logical_count=torch.ones(E + 1, dtype=torch.int32)),
     "logical_count must be a contiguous"),
    (dict(to_physical_map=torch.zeros(E + 1, 2, dtype=torch.int32), logical_count=torch.ones(E + 1, dtype=torch.int32)),
     "to_physical_map must be a contiguous"),
    (dict(use_shared_as_routed=True, num_shared_experts=2, to_physical_map=torch.zeros(E + 2, 2, dtype=torch.int32),
          logical_count=torch.ones(E + 2, dtype=torch.int32)), "duplicate slots"),
])
def test_top2_sum_gate_bad_options(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _gate(**kw)


def test_top2_sum_gate_bad_tensors():
    with pytest.raises(TypeError, match="logits has dtype torch.bfloat16"):
        _gate(logits=torch.randn(4, E, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="logits must be 2-D"):
        _gate(logits=torch.randn(4, E, 1))
    with pytest.raises(ValueError, match="logits must be contiguous"):
        _gate(logits=torch.randn(E, 4).t())
    with pytest.raises(ValueError, match=r"bias must be a contiguous \[256\]"):
        _gate(bias=torch.zeros(E + 1))
    with pytest.raises(ValueError, match="experts per group"):
        _gate(logits=torch.randn(4, 8), bias=torch.zeros(8), num_groups=8, num_topk_groups=4, num_topk=2)
    with pytest.raises(ValueError, match="group layout not supported"):
        _gate(logits=torch.randn(4, 72), bias=torch.zeros(72), num_groups=8, num_topk_groups=4, num_topk=6)


def test_top2_sum_gate_valid_cpu_input_asks_for_cuda():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        _gate()


def test_top2_sum_gate_zero_tokens_needs_no_device():
    idx, w = _gate(logits=torch.empty(0, E), use_shared_as_routed=True, num_shared_experts=1)
    assert idx.shape == (0, 9) and idx.dtype == torch.int64 and w.shape == (0, 9) and w.dtype == torch.float32


def test_top2_sum_gate_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        logits = torch.empty(16, E, device="cuda")
        idx, w = torch.ops.kernelkiln.top2_sum_gate(logits, torch.empty(E, device="cuda"), 8, 4, 8, True, 1, 2.5,
                                                  0, 1, 0, 1, "sigmoid")
        assert idx.shape == (16, 9) and w.dtype == torch.float32


@pytest.mark.parametrize("bad,exc,match", [
    (torch.randn(4, 8, dtype=torch.float64), TypeError, "topk_weights has dtype torch.float64"),
    (torch.randn(4, 33), ValueError, r"num_topk\) must be in 1..32"),
    (torch.randn(4, 0), ValueError, r"num_topk\) must be in 1..32"),
    (torch.randn(8), ValueError, "topk_weights must be 2-D"),
    (torch.randn(8, 4).t(), ValueError, "inner stride 1"),
    ([[1.0]], TypeError, "topk_weights must be a torch.Tensor"),
])
def test_normalize_weight_bad_inputs(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.moe.normalize_weight(bad)


def test_normalize_weight_cpu_and_empty():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        kernelkiln.moe.normalize_weight(torch.rand(4, 8))
    den, out = kernelkiln.moe.normalize_weight(torch.empty(0, 8))
    assert den.shape == (0,) and out.shape == (0, 8)
