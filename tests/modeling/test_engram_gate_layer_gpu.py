"""The Engram gate layer on the GPU: forward and gradients against autograd through the peer-semantics reference
(engram_gate_ref with fp32 weights, the peer's tolerance), main_grad accumulation, image tokens, the compile path
(torch.compile(fullgraph=True)) bit-identical to the eager Function, and leading shapes of any rank."""
import pytest
import torch

import kernelkiln.modeling  # noqa: F401
from bitwise import assert_bitwise
from kernelkiln.modeling.engram import engram_gate
from kernelkiln.torch import engram_gate_ref

pytestmark = pytest.mark.gpu


def _calc_diff(x, y):
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return ((x - y).pow(2).sum() / denom).item() if denom else 0.0


def _inputs(t, hc, h, lead=None):
    lead = lead or (t,)
    x = torch.randn(*lead, hc, h, device="cuda").bfloat16()
    kv = torch.randn(*lead, (hc + 1) * h, device="cuda").bfloat16()
    wh = (torch.randn(hc, h, device="cuda") * 0.1 + 1).bfloat16()
    we = (torch.randn(hc, h, device="cuda") * 0.1 + 1).bfloat16()
    return x, kv, wh, we


def _opcheck_layer():
    x, kv, wh, we = _inputs(64, 4, 512)
    # no mask: the saved rows of image tokens are left unwritten (as the peer's), which opcheck's comparison of
    # two runs would flag; the masked layer is checked against the kernel chain below
    return (x.requires_grad_(), kv.requires_grad_(), wh.requires_grad_(), we.requires_grad_(), 1e-6, 1e-20,
            None), {}


def _opcheck_layer_backward():
    from kernelkiln.engram import engram_gate_fwd, fused_weight
    x, kv, wh, we = _inputs(64, 4, 512)
    wf = fused_weight(wh, we)
    _, dot, gate, rx, rk = engram_gate_fwd(x, kv.view(64, 5, 512), wf, 1e-20, 1e-6)
    go = torch.randn_like(x)
    return (go, x, kv, wh, we, wf, dot, gate, rx, rk, 1e-6, None), {}


OPCHECK_CASES = {"engram_gate_layer": _opcheck_layer, "engram_gate_layer_backward": _opcheck_layer_backward}


def _grads(fn, x, kv, wh, we, go, mask, weights_fp32=False):
    x, kv = x.clone().requires_grad_(), kv.clone().requires_grad_()
    wh = (wh.float() if weights_fp32 else wh.clone()).requires_grad_()
    we = (we.float() if weights_fp32 else we.clone()).requires_grad_()
    out = fn(x, kv, wh, we, mask)
    out.backward(go)
    return out.detach(), x.grad, kv.grad, wh.grad, we.grad


def _ours(x, kv, wh, we, mask):
    return engram_gate(x, kv, wh, we, 1e-6, 1e-20, mask)


def _ref(x, kv, wh, we, mask):
    hc, h = x.shape[-2:]
    return engram_gate_ref(x.view(-1, hc, h), kv.view(-1, hc + 1, h), wh, we, 1e-6, 1e-20,
                           image_token_mask=mask).view(x.shape)


def _chain(x, kv, wh, we, go, mask):
    """The layer's computation from the kernels themselves: fused_weight, the gate forward and backward,
    grad_w_reduce into fresh fp32 buffers (autograd then casts them to the weights' bf16)."""
    from kernelkiln.engram import engram_gate_bwd, engram_gate_fwd, fused_weight, grad_w_reduce
    hc, h = x.shape[-2:]
    x3, kv3 = x.view(-1, hc, h), kv.view(-1, hc + 1, h)
    wf = fused_weight(wh, we)
    out, dot, gate, rx, rk = engram_gate_fwd(x3, kv3, wf, 1e-20, 1e-6, image_token_mask=mask)
    gx, gkv, part = engram_gate_bwd(go.reshape(x3.shape), x3, kv3, wf, dot, gate, rx, rk, 1e-6, image_token_mask=mask)
    gwh, gwe = torch.zeros_like(wh, dtype=torch.float32), torch.zeros_like(we, dtype=torch.float32)
    grad_w_reduce(part, wh, we, gwh, gwe)
    return out.view(x.shape), gx.view(x.shape), gkv.view(kv.shape), gwh.to(wh.dtype), gwe.to(we.dtype)


@pytest.mark.parametrize("t", [1, 4001, 8001])
@pytest.mark.parametrize("h", [512, 2560, 4096, 7168])
@pytest.mark.parametrize("masked", [False, True])
def test_layer_is_the_kernel_chain_and_matches_the_reference(seed, t, h, masked):
    hc = 4
    x, kv, wh, we = _inputs(t, hc, h)
    go = torch.randn(t, hc, h, device="cuda").bfloat16()
    mask = torch.rand(t, device="cuda") < 0.2 if masked else None
    ours = _grads(_ours, x, kv, wh, we, go, mask)
    for name, a, b in zip(("out", "x", "kv", "weight_hidden", "weight_embed"), ours, _chain(x, kv, wh, we, go, mask)):
        assert_bitwise(a, b, f"layer {name} vs the kernel chain")
    ref = _grads(_ref, x, kv, wh, we, go, mask, weights_fp32=True)
    # The forward's bf16 output differs from the fp32-weight reference by its own roundings (measured on the H200:
    # up to 2.1e-10 at eaa11d0, seed-dependent), so the bound is 1e-9.
    assert _calc_diff(ours[0], ref[0]) < 1e-9
    # The peer's 1e-8 bound on the gradients holds for the backward kernel fed the reference's saved tensors
    # (tests/engram/test_engram_gate_gpu.py). End to end, the forward's own rounding of the dot product enters
    # d(gate)/d(dot) ~ 1/sqrt(|dot|), which is ill-conditioned for the tokens whose dot is small, and one such token
    # dominates a global relative measure: the H200 runs measured 1.6e-8 .. 1.1e-5 (98ae68e) and up to 5.1e-4
    # (eaa11d0). This end-to-end check is about the wiring (the layer is the kernel chain, bit for bit, above), and
    # a wrong or missing term gives ~1, so its bound is 1e-2.
    for name, a, b in zip(("x", "kv", "weight_hidden", "weight_embed"), ours[1:], ref[1:]):
        assert a.shape == b.shape, name
        assert _calc_diff(a.float(), b.float()) < 1e-2, name
    if masked and mask.any():
        assert_bitwise(ours[1].view(t, hc, h)[mask], go[mask], "grad_x of image tokens")
        assert (ours[2].view(t, hc + 1, h)[mask] == 0).all()


def test_main_grad_is_accumulated_and_no_grad_returned(seed):
    t, hc, h = 512, 4, 2560
    x, kv, wh, we = _inputs(t, hc, h)
    go = torch.randn(t, hc, h, device="cuda").bfloat16()
    _, _, _, gwh, gwe = _grads(_ours, x, kv, wh, we, go, None)
    wh2, we2 = wh.clone().requires_grad_(), we.clone().requires_grad_()
    wh2.main_grad = torch.full((hc, h), 1.0, device="cuda")
    we2.main_grad = torch.full((hc, h), -2.0, device="cuda")
    out = engram_gate(x.clone().requires_grad_(), kv.clone().requires_grad_(), wh2, we2, 1e-6, 1e-20, None)
    out.backward(go)
    assert wh2.grad is None and we2.grad is None
    # the fresh-buffer gradients come back cast to the weights' bf16; main_grad holds the fp32 sums
    torch.testing.assert_close((wh2.main_grad - 1.0).bfloat16(), gwh, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close((we2.main_grad + 2.0).bfloat16(), gwe, rtol=1e-2, atol=1e-2)


def test_any_leading_shape(seed):
    x, kv, wh, we = _inputs(None, 4, 512, lead=(2, 3, 7))
    go = torch.randn_like(x)
    ours = _grads(_ours, x, kv, wh, we, go, None)
    flat = _grads(_ours, x.view(42, 4, 512), kv.view(42, 5 * 512), wh, we, go.view(42, 4, 512), None)
    assert ours[0].shape == x.shape and ours[2].shape == kv.shape
    for a, b in zip(ours, flat):
        assert_bitwise(a.reshape(b.shape), b, "leading-shape result")


@pytest.mark.parametrize("masked", [False, True])
def test_compiled_fullgraph_equals_eager(seed, masked):
    t, hc, h = 1000, 4, 2560
    x, kv, wh, we = _inputs(t, hc, h)
    go = torch.randn(t, hc, h, device="cuda").bfloat16()
    mask = torch.rand(t, device="cuda") < 0.2 if masked else None
    compiled = torch.compile(lambda x, kv, wh, we, mask: engram_gate(x, kv, wh, we, 1e-6, 1e-20, mask),
                             fullgraph=True)
    eager = _grads(_ours, x, kv, wh, we, go, mask)
    comp = _grads(compiled, x, kv, wh, we, go, mask)
    for name, a, b in zip(("out", "x", "kv", "wh", "we"), comp, eager):
        assert_bitwise(a, b, f"compiled {name}")


def test_empty_batch(seed):
    x, kv, wh, we = _inputs(0, 4, 512)
    go = torch.randn_like(x)
    out, gx, gkv, gwh, gwe = _grads(_ours, x, kv, wh, we, go, None)
    assert out.shape == (0, 4, 512) and gx.shape == x.shape and gkv.shape == kv.shape
    assert (gwh.float() == 0).all() and (gwe.float() == 0).all()
