"""The Engram gate layer on the CPU: argument errors name the argument, and the compile path's two registered ops
(kernelkiln::engram_gate_layer and its derivative) trace forward and backward on fake tensors with the right
shapes and dtypes (what torch.compile(fullgraph=True) relies on)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelkiln.modeling
from kernelkiln.modeling.engram import EngramGateFn, engram_gate
from kernelkiln.modeling.engram._gate import _layer_op

HC, H = 4, 512


def _inputs(lead=(3, 5)):
    x = torch.randn(*lead, HC, H).bfloat16()
    kv = torch.randn(*lead, (HC + 1) * H).bfloat16()
    wh, we = torch.randn(HC, H).bfloat16(), torch.randn(HC, H).bfloat16()
    return [x, kv, wh, we, 1e-6, 1e-20, None]


def test_peer_names():
    assert kernelkiln.modeling.engram.engram_gate is engram_gate
    assert issubclass(EngramGateFn, torch.autograd.Function)


@pytest.mark.parametrize("index, bad, exc, match", [
    (0, lambda t: t.float(), TypeError, "hidden_states has dtype"),
    (1, lambda t: t.reshape(3, 5, HC + 1, H), ValueError, r"kv must be flattened to \[\*, \(hc \+ 1\) \* H\]"),
    (1, lambda t: t[..., :H * HC], ValueError, "kv must be flattened"),
    (1, lambda t: t.float(), TypeError, "kv has dtype"),
    (2, lambda t: t[:2], ValueError, "weight_hidden must have shape"),
    (2, lambda t: t.float(), TypeError, "weight_hidden has dtype"),
    (3, lambda t: t[:, :256].contiguous(), ValueError, "weight_embed must have weight_hidden's shape"),
    (4, lambda v: "1e-6", TypeError, "clamp_value must be a Python float"),
    (5, lambda v: None, TypeError, "eps must be a Python float"),
    (6, lambda v: torch.zeros(3, 5, dtype=torch.int32), TypeError, "image_token_mask has dtype"),
    (6, lambda v: torch.zeros(7, dtype=torch.bool), ValueError, "image_token_mask must have one entry per token"),
])
def test_layer_argument_errors(index, bad, exc, match):
    args = _inputs()
    args[index] = bad(args[index])
    with pytest.raises(exc, match=match):
        engram_gate(*args)


def test_hidden_size_must_be_a_multiple_of_256():
    x = torch.randn(2, HC, 300).bfloat16()
    kv = torch.randn(2, (HC + 1) * 300).bfloat16()
    w = torch.randn(HC, 300).bfloat16()
    with pytest.raises(ValueError, match="multiple of 256"):
        engram_gate(x, kv, w, w.clone(), 1e-6, 1e-20, None)


def test_cpu_tensors_get_the_projects_error():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        engram_gate(*_inputs())


@pytest.mark.parametrize("masked", [False, True])
def test_compile_path_traces_forward_and_backward_on_fake_tensors(masked):
    with FakeTensorMode():
        x, kv, wh, we, clamp, eps, _ = _inputs()
        for t in (x, kv, wh, we):
            t.requires_grad_()
        mask = torch.zeros(3, 5, dtype=torch.bool) if masked else None
        out, wf, dot, gate, rx, rk = _layer_op(x, kv, wh, we, clamp, eps, mask)
        assert out.shape == x.shape and out.dtype == torch.bfloat16
        assert wf.shape == (HC, H) and wf.dtype == torch.float32
        assert all(s.shape == (15, HC) and s.dtype == torch.float32 for s in (dot, gate, rx, rk))
        gx, gkv, gwh, gwe = torch.autograd.grad(out, (x, kv, wh, we), torch.ones_like(out))
        assert gx.shape == x.shape and gkv.shape == kv.shape and gwh.shape == wh.shape and gwe.shape == we.shape
