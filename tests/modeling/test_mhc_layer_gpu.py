"""The v1 mHC autograd layer (kernelkiln.modeling.mhc) on the GPU.

* Gradients of the expand, mhc_post, mhc_pre (+ mhc_post, whose backward the fused residual gradient needs) and
  mhc_head pipelines against autograd through the peer-semantics references (kernelkiln.torch), at tile_kernels
  1.0.0's test tolerances (its upstream tests) on its shapes and data (residual randn·(1 + 0.01·stream), fn
  randn·1e-4, scale and base randn·0.1).
* mhc_pre with and without autograd (the fused inference path) agree at 1e-4, norm_weight included (1.0.0's
  inference path ignored it), and bit for bit (big_fuse ≡ the unfused chain of our kernels, as the peer checks).
* The grad_from_mhc_post protocol sums the residual gradient: it matches the explicitly returned gradients.
* torch.compile(fullgraph=True) equals eager bit for bit (every gradient of the single Functions and of mhc_head;
  a block's outputs and parameter gradients — its residual gradient is summed by autograd under compile instead
  of fused, so it is compared at bf16 tolerance).
* OPCHECK_CASES for every op the layer registers (run by tests/runtime/test_opcheck_gpu.py).
"""
import pytest
import torch

import kernelkiln.modeling  # noqa: F401
from bitwise import assert_bitwise
from kernelkiln.modeling import mhc
from kernelkiln.modeling.mhc import ops
from kernelkiln.modeling.mhc.ops import _common
from kernelkiln.torch import (expand_to_mhc_ref, mhc_head_compute_mix_ref, mhc_post_ref, mhc_pre_apply_mix_ref,
                              mhc_pre_norm_fn_ref, mhc_pre_split_mixes_ref, sinkhorn_normalize_ref)

pytestmark = pytest.mark.gpu
M, M3 = 4, 24
HIDDEN = [1280, 2560, 7168]
TOKENS = [(1, 4096), (2, 1024)]
BF16_TOL = dict(rtol=1.6e-2, atol=1e-5)  # torch.testing's bf16 defaults, what 1.0.0's post test used
# 1.0.0's pre_apply_mix tolerance (rtol 1e-3, atol 1e-2) with rtol widened to one bf16 ulp (2^-7 of the value at
# most): the reference's fp32 sums differ from the kernels' in the last bits, so a value near a rounding boundary
# rounds to the neighbouring bf16, 0.015625 for values in [2, 4). The H200 run of 52c1343 measured exactly that in
# 1-28 of 2.6-29 million layer inputs per case, and nothing larger.
LAYER_INPUT_TOL = dict(rtol=2.0**-7, atol=1e-2)


def _calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return ((x - y) ** 2).sum().item() / den.item() if den else 0.0


def _residual(a, b, h):
    stream = torch.arange(M, device="cuda").view(1, 1, M, 1)
    return (torch.randn(a, b, M, h, device="cuda") * (1 + 0.01 * stream)).bfloat16()


def _params(h, head=False):
    rows = M if head else M3
    return {"fn": torch.randn(rows, M * h, device="cuda") * 1e-4,
            "scale": torch.randn(1 if head else 3, device="cuda") * 0.1,
            "base": torch.randn(M if head else M3, device="cuda") * 0.1,
            "normw": torch.randn(M * h, device="cuda") * 0.1 + 1}


def _leaves(d):
    return {k: v.detach().clone().requires_grad_() for k, v in d.items()}


# ------------------------------------------------------------------------------------------ reference pipelines
def _ref_pre(residual, p, norm_weight=True, post_mult=2.0, repeat=20):
    mixes = mhc_pre_norm_fn_ref(residual, p["fn"], p["normw"] if norm_weight else None, 1e-6)
    pre, post, comb = mhc_pre_split_mixes_ref(mixes, p["scale"], p["base"], M, post_mult, 1e-6)
    comb = sinkhorn_normalize_ref(comb, repeat=repeat, eps=1e-6)
    return mhc_pre_apply_mix_ref(residual, pre), (post, comb)


def _our_pre(residual, p, norm_weight=True, post_mult=2.0, repeat=20):
    return mhc.mhc_pre(residual, p["fn"], p["scale"], p["base"], norm_weight=p["normw"] if norm_weight else None,
                       post_mult_value=post_mult, sinkhorn_repeat=repeat)


def _ref_head(residual, p):
    fn = torch.nn.functional.pad(p["fn"], (0, 0, 0, M3 - M))
    mix = mhc_head_compute_mix_ref(mhc_pre_norm_fn_ref(residual, fn, p["normw"], 1e-6)[..., :M], p["scale"],
                                   p["base"], 1e-6)
    return mhc_pre_apply_mix_ref(residual, mix.unsqueeze(-1))


def _our_head(residual, p):
    return mhc.mhc_head(residual, p["fn"], p["scale"], p["base"], norm_weight=p["normw"])


# ------------------------------------------------------------------------------------------ pipelines vs references
@pytest.mark.parametrize("a, b", TOKENS)
@pytest.mark.parametrize("h", HIDDEN)
def test_expand_pipeline(seed, a, b, h):
    x = torch.randn(a, b, h, device="cuda").bfloat16()
    go = torch.randn(a, b, M, h, device="cuda").bfloat16()
    # The reference's leaf is fp32: a bf16 leaf would have autograd add the m stream gradients in bf16, one
    # rounding per add, which is far from the kernel's fp32 sum where the streams cancel.
    ours, ref = x.clone().requires_grad_(), x.float().requires_grad_()
    out = mhc.expand_from_embedding(ours, M)
    expected = expand_to_mhc_ref(ref, M)
    assert_bitwise(out, expected.bfloat16(), "expand")
    out.backward(go)
    expected.backward(go.float())
    torch.testing.assert_close(ours.grad, ref.grad.bfloat16(), **BF16_TOL)


@pytest.mark.parametrize("a, b", TOKENS)
@pytest.mark.parametrize("h", HIDDEN)
def test_post_pipeline(seed, a, b, h):
    x = torch.randn(a, b, h, device="cuda").bfloat16()
    residual = _residual(a, b, h)
    post = torch.rand(a, b, M, 1, device="cuda") * 2
    comb = torch.softmax(torch.randn(a, b, M, M, device="cuda"), -1)
    go = torch.randn(a, b, M, h, device="cuda").bfloat16()
    ours = [t.clone().requires_grad_() for t in (x, residual, post, comb)]
    ref = [t.clone().requires_grad_() for t in (x, residual, post, comb)]
    out = ops.mhc_post(*ours)
    expected = mhc_post_ref(*ref)
    torch.testing.assert_close(out, expected, **BF16_TOL)
    out.backward(go)
    expected.backward(go)
    _common.clear_fused_buffer(ours[1])  # nothing consumed it here
    for name, o, r, tol in zip(("x", "residual", "post", "comb"), ours, ref,
                               (BF16_TOL, BF16_TOL, dict(rtol=1e-4, atol=1e-4), dict(rtol=1e-4, atol=1e-4))):
        torch.testing.assert_close(o.grad, r.grad, **tol, msg=lambda m: f"d_{name}: {m}")


@pytest.mark.parametrize("a, b", TOKENS)
@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("norm_weight", [False, True])
def test_pre_pipeline(seed, a, b, h, norm_weight):
    """mhc_pre then mhc_post (the residual gradient is fused through the protocol) against the references."""
    residual = _residual(a, b, h)
    p = _params(h)
    layer_out = torch.randn(a, b, h, device="cuda").bfloat16()
    go = torch.randn(a, b, M, h, device="cuda").bfloat16()

    def run(pre_fn, post_fn):
        r, q = residual.clone().requires_grad_(), _leaves(p)
        layer_input, (post, comb) = pre_fn(r, q, norm_weight)
        out = post_fn(layer_input * 0.5 + layer_out, r, post, comb)
        out.backward(go)
        return layer_input.detach(), post.detach(), comb.detach(), out.detach(), r, q

    li, post, comb, out, r, q = run(_our_pre, ops.mhc_post)
    li_r, post_r, comb_r, out_r, r_r, q_r = run(_ref_pre, mhc_post_ref)
    assert not hasattr(r.untyped_storage(), _common.GRAD_ATTR)
    torch.testing.assert_close(li, li_r, **LAYER_INPUT_TOL)
    torch.testing.assert_close(post, post_r, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(comb, comb_r, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(out, out_r, rtol=1.6e-2, atol=1e-2)
    assert _calc_diff(r.grad, r_r.grad) < 1e-5
    # fn's gradient is a TF32 GEMM over the tokens (its error bound is tested on the kernel, in
    # tests/mhc/test_mhc_norm_fn_gpu.py); 1.0.0's absolute 3e-2 does not scale with the token count (the H200 run of
    # 52c1343 measured 0.047 at 2048 tokens), so here the check is the statistical one of its other gradients.
    assert _calc_diff(q["fn"].grad, q_r["fn"].grad) < 1e-6
    for name in ("scale", "base") + (("normw",) if norm_weight else ()):
        assert _calc_diff(q[name].grad, q_r[name].grad) < 1e-5, name


@pytest.mark.parametrize("a, b", TOKENS)
@pytest.mark.parametrize("h", HIDDEN)
def test_head_pipeline(seed, a, b, h):
    residual = _residual(a, b, h)
    p = _params(h, head=True)
    go = torch.randn(a, b, h, device="cuda").bfloat16()
    r, q = residual.clone().requires_grad_(), _leaves(p)
    r_r, q_r = residual.clone().requires_grad_(), _leaves(p)
    out = _our_head(r, q)
    expected = _ref_head(r_r, q_r)
    torch.testing.assert_close(out, expected, **LAYER_INPUT_TOL)
    out.backward(go)
    expected.backward(go)
    assert _calc_diff(r.grad, r_r.grad) < 1e-5
    assert _calc_diff(q["fn"].grad, q_r["fn"].grad) < 1e-6  # as in test_pre_pipeline
    for name in ("scale", "base", "normw"):
        assert _calc_diff(q[name].grad, q_r[name].grad) < 1e-5, name


# ------------------------------------------------------------------------------------------ train vs eval
@pytest.mark.parametrize("b", [4096, 8192])
@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("norm_weight", [False, True])
def test_train_and_eval_mhc_pre_agree(seed, b, h, norm_weight):
    residual = _residual(1, b, h)
    p = _params(h)
    if norm_weight:  # a weight far from 1, so ignoring it would show
        p["normw"] = torch.rand(M * h, device="cuda") * 4
    r = residual.clone().requires_grad_()
    train, (post_t, comb_t) = _our_pre(r, p, norm_weight)
    with torch.no_grad():
        evaluated, (post_e, comb_e) = _our_pre(residual, p, norm_weight)
    for name, t, e in (("layer_input", train, evaluated), ("post", post_t, post_e), ("comb", comb_t, comb_e)):
        torch.testing.assert_close(e.float(), t.detach().float(), rtol=1e-4, atol=1e-4, msg=lambda m: f"{name}: {m}")
        assert_bitwise(e, t.detach(), f"{name}: big_fuse ≡ the unfused chain")


# ------------------------------------------------------------------------------------------ the protocol
@pytest.mark.parametrize("h", [2560, 7168])
def test_grad_from_mhc_post_sums_the_residual_gradient(seed, h):
    """The fused residual gradient (eager default) against the three gradients returned and added by autograd."""
    residual = _residual(1, 2048, h)
    p = _params(h)
    go = torch.randn(1, 2048, M, h, device="cuda").bfloat16()

    def run(fuse):
        r, q = residual.clone().requires_grad_(), _leaves(p)
        mixes = ops.mhc_pre_norm_fn(r, q["fn"], q["normw"], 1e-6, fuse_grad_acc=fuse)
        pre, post, comb = ops.mhc_pre_split_mixes(mixes, q["scale"], q["base"], M, 2.0, 1e-6)
        comb = ops.sinkhorn_normalize(comb, repeat=20)
        layer_input = ops.mhc_pre_apply_mix(r, pre)
        out = ops.mhc_post(layer_input, r, post, comb)
        if not fuse:
            # no fused consumer: take mhc_post's attribute off before apply-mix's backward could see it
            layer_input.register_hook(lambda g: _common.clear_fused_buffer(r))
        out.backward(go)
        return r.grad, q

    fused, q_f = run(True)
    returned, q_r = run(False)
    assert _calc_diff(fused, returned) < 1e-5
    torch.testing.assert_close(fused, returned, rtol=3e-2, atol=3e-2)
    for name in p:
        assert_bitwise(q_f[name].grad, q_r[name].grad, f"{name} gradient does not depend on the protocol")


def test_main_grad_accumulates(seed):
    h = 2560
    residual = _residual(1, 512, h)
    p = _params(h)
    go = torch.randn(1, 512, M3, device="cuda")
    q = _leaves(p)
    ops.mhc_pre_norm_fn(residual, q["fn"], q["normw"], 1e-6, fuse_grad_acc=False).backward(go)
    q2 = _leaves(p)
    q2["fn"].main_grad = torch.full_like(p["fn"], 0.5)
    q2["normw"].main_grad = torch.full_like(p["normw"], -1.0)
    ops.mhc_pre_norm_fn(residual, q2["fn"], q2["normw"], 1e-6, fuse_grad_acc=False).backward(go)
    assert q2["fn"].grad is None and q2["normw"].grad is None
    # the merge backward accumulates into the buffers with one fma per element: fp32 rounding of the sums
    torch.testing.assert_close(q2["fn"].main_grad - 0.5, q["fn"].grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(q2["normw"].main_grad + 1.0, q["normw"].grad, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ compiled == eager
def _grads_of(f, inputs, go):
    leaves = [t.clone().requires_grad_() if t.is_floating_point() else t for t in inputs]
    out = f(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    torch.autograd.backward(outs, go)
    return [o.detach() for o in outs], [t.grad for t in leaves if t.is_floating_point()], leaves


SINGLE = {
    "expand": (lambda x: ops.expand_to_mhc(x, M),
               lambda: [torch.randn(3, 100, 2560, device="cuda").bfloat16()],
               lambda: [torch.randn(3, 100, M, 2560, device="cuda").bfloat16()]),
    "head_compute_mix": (lambda x, s, b: ops.mhc_head_compute_mix(x, s, b, 1e-6),
                         lambda: [torch.randn(3, 100, M, device="cuda"), torch.randn(1, device="cuda"),
                                  torch.randn(M, device="cuda")],
                         lambda: [torch.randn(3, 100, M, device="cuda")]),
    "pre_split_mixes": (lambda x, s, b: ops.mhc_pre_split_mixes(x, s, b, M, 2.0, 1e-6),
                        lambda: [torch.randn(3, 100, M3, device="cuda"), torch.randn(3, device="cuda"),
                                 torch.randn(M3, device="cuda")],
                        lambda: [torch.randn(3, 100, M, 1, device="cuda"), torch.randn(3, 100, M, 1, device="cuda"),
                                 torch.randn(3, 100, M, M, device="cuda")]),
    "sinkhorn": (lambda x: ops.sinkhorn_normalize(x, repeat=20),
                 lambda: [torch.randn(3, 100, M, M, device="cuda")],
                 lambda: [torch.randn(3, 100, M, M, device="cuda")]),
    "pre_apply_mix": (ops.mhc_pre_apply_mix,
                      lambda: [_residual(3, 100, 2560), torch.rand(3, 100, M, 1, device="cuda")],
                      lambda: [torch.randn(3, 100, 2560, device="cuda").bfloat16()]),
    "post": (lambda x, r, p, c: ops.mhc_post(x, r, p, c),
             lambda: [torch.randn(3, 100, 2560, device="cuda").bfloat16(), _residual(3, 100, 2560),
                      torch.rand(3, 100, M, 1, device="cuda"), torch.rand(3, 100, M, M, device="cuda")],
             lambda: [torch.randn(3, 100, M, 2560, device="cuda").bfloat16()]),
    "pre_norm_fn": (lambda r, fn, w: ops.mhc_pre_norm_fn(r, fn, w, 1e-6, fuse_grad_acc=False),
                    lambda: [_residual(3, 100, 2560), torch.randn(M3, M * 2560, device="cuda") * 1e-2,
                             torch.rand(M * 2560, device="cuda") + 0.5],
                    lambda: [torch.randn(3, 100, M3, device="cuda")]),
    "head": (lambda r, fn, s, b, w: mhc.mhc_head(r, fn, s, b, norm_weight=w),
             lambda: [_residual(3, 100, 2560), torch.randn(M, M * 2560, device="cuda") * 1e-2,
                      torch.randn(1, device="cuda"), torch.randn(M, device="cuda"),
                      torch.rand(M * 2560, device="cuda") + 0.5],
             lambda: [torch.randn(3, 100, 2560, device="cuda").bfloat16()]),
}


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_compiled_fullgraph_equals_eager(seed, name):
    f, inputs, grads = SINGLE[name]
    x, go = inputs(), grads()
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    outs_e, grads_e, leaves_e = _grads_of(f, x, go)
    outs_c, grads_c, _ = _grads_of(compiled, x, go)
    for t in leaves_e:
        _common.clear_fused_buffer(t)  # eager mhc_post's attribute, which nothing consumed here
    for i, (c, e) in enumerate(zip(outs_c, outs_e)):
        assert_bitwise(c, e, f"{name} output {i}")
    for i, (c, e) in enumerate(zip(grads_c, grads_e)):
        assert_bitwise(c, e, f"{name} gradient {i}")


def test_compiled_block_equals_eager(seed):
    h = 2560

    def block(emb, fn, scale, base, normw, hfn, hscale, hbase):
        residual = mhc.expand_from_embedding(emb, M)
        layer_input, (post, comb) = mhc.mhc_pre(residual, fn, scale, base, norm_weight=normw, post_mult_value=2.0,
                                                sinkhorn_repeat=20)
        residual = ops.mhc_post(layer_input * 2, residual, post, comb)
        return mhc.mhc_head(residual, hfn, hscale, hbase)

    p, hp = _params(h), _params(h, head=True)
    inputs = [torch.randn(2, 512, h, device="cuda").bfloat16(), p["fn"], p["scale"], p["base"], p["normw"],
              hp["fn"], hp["scale"], hp["base"]]
    go = [torch.randn(2, 512, h, device="cuda").bfloat16()]
    torch._dynamo.reset()
    outs_e, grads_e, _ = _grads_of(block, inputs, go)
    outs_c, grads_c, _ = _grads_of(torch.compile(block, fullgraph=True), inputs, go)
    assert_bitwise(outs_c[0], outs_e[0], "block output")
    names = ("emb", "fn", "scale", "base", "normw", "hfn", "hscale", "hbase")
    for name, c, e in zip(names, grads_c, grads_e):
        if name == "emb":  # the residual gradient: fused in eager, summed by autograd under compile
            torch.testing.assert_close(c, e, rtol=3e-2, atol=3e-2)
            assert _calc_diff(c, e) < 1e-5
        else:  # the parameters see the residual gradient only through the mixes' gradients: unaffected
            assert_bitwise(c, e, f"block {name} gradient")


def test_compiled_no_grad_mhc_pre_equals_eager(seed):
    h = 4096
    residual, p = _residual(1, 1024, h), _params(h)

    def pre(r, fn, s, b, w):
        return mhc.mhc_pre(r, fn, s, b, norm_weight=w, post_mult_value=2.0, sinkhorn_repeat=20)

    with torch.no_grad():
        eager = pre(residual, p["fn"], p["scale"], p["base"], p["normw"])
        torch._dynamo.reset()
        compiled = torch.compile(pre, fullgraph=True)(residual, p["fn"], p["scale"], p["base"], p["normw"])
    assert_bitwise(compiled[0], eager[0], "layer_input")
    assert_bitwise(compiled[1][0], eager[1][0], "post_mix")
    assert_bitwise(compiled[1][1], eager[1][1], "comb_mix")


def test_empty_batch(seed):
    h = 1280
    residual = _residual(1, 0, h).requires_grad_()
    p = _leaves(_params(h))
    layer_input, (post, comb) = _our_pre(residual, p)
    out = ops.mhc_post(layer_input, residual, post, comb)
    out.backward(torch.zeros_like(out))
    assert residual.grad.shape == residual.shape and (p["fn"].grad == 0).all() and (p["scale"].grad == 0).all()


# ------------------------------------------------------------------------------------------ opcheck
def _r(*shape):
    return torch.randn(*shape, device="cuda")


def _opcheck_norm_backward():
    from kernelkiln.modeling.mhc.ops.norm_fn import _forward
    residual, fn = _residual(2, 32, 256), _r(M3, M * 256) * 1e-2
    _, fn_tf32, out_mul, sqrsum = _forward(residual, fn, 1e-6)
    return (_r(2, 32, M3), residual, fn_tf32, out_mul, sqrsum, 1e-6), {}


def _opcheck_split_backward():
    x = _r(2, 32, M3)
    post = ops.mhc_pre_split_mixes(x, _r(3), _r(M3), M, 2.0, 1e-6)[1].detach()
    return (_r(2, 32, M, 1), _r(2, 32, M, 1), _r(2, 32, M, M), x, post, _r(3), _r(M3), 2.0), {}


OPCHECK_CASES = {
    "mhc_layer_expand": lambda: ((torch.randn(2, 32, 256, device="cuda").bfloat16().requires_grad_(), M), {}),
    "mhc_layer_expand_backward": lambda: ((_residual(2, 32, 256),), {}),
    "mhc_layer_head_compute_mix": lambda: ((_r(2, 32, M).requires_grad_(), _r(1).requires_grad_(),
                                            _r(M).requires_grad_(), 1e-6), {}),
    "mhc_layer_head_compute_mix_backward": lambda: ((_r(2, 32, M), _r(2, 32, M), _r(1), _r(M)), {}),
    "mhc_layer_pre_split_mixes": lambda: ((_r(2, 32, M3).requires_grad_(), _r(3).requires_grad_(),
                                           _r(M3).requires_grad_(), M, 2.0, 1e-6), {}),
    "mhc_layer_pre_split_mixes_backward": _opcheck_split_backward,
    "mhc_layer_sinkhorn": lambda: ((_r(64, M, M).requires_grad_(), 20, 1e-6), {}),
    "mhc_layer_sinkhorn_backward": lambda: ((_r(64, M, M), _r(64, M, M), 20, 1e-6), {}),
    "mhc_layer_pre_apply_mix": lambda: ((_residual(2, 32, 256).requires_grad_(),
                                         torch.rand(2, 32, M, 1, device="cuda").requires_grad_()), {}),
    "mhc_layer_pre_apply_mix_backward": lambda: ((torch.randn(2, 32, 256, device="cuda").bfloat16(),
                                                  _residual(2, 32, 256), torch.rand(2, 32, M, 1, device="cuda")), {}),
    "mhc_layer_post": lambda: ((torch.randn(2, 32, 256, device="cuda").bfloat16().requires_grad_(),
                                _residual(2, 32, 256).requires_grad_(),
                                torch.rand(2, 32, M, 1, device="cuda").requires_grad_(),
                                torch.rand(2, 32, M, M, device="cuda").requires_grad_()), {}),
    "mhc_layer_post_backward": lambda: ((torch.randn(2, 32, 256, device="cuda").bfloat16(), _residual(2, 32, 256),
                                         torch.rand(2, 32, M, 1, device="cuda"), torch.rand(2, 32, M, M, device="cuda"),
                                         _residual(2, 32, 256)), {}),
    "mhc_layer_fn_normw_merge": lambda: ((_r(M3, 1024).requires_grad_(), _r(1024).requires_grad_()), {}),
    "mhc_layer_fn_normw_merge_backward": lambda: ((_r(M3, 1024), _r(1024), _r(M3, 1024)), {}),
    "mhc_layer_pre_norm_fn": lambda: ((_residual(2, 32, 256).requires_grad_(),
                                       (_r(M3, M * 256) * 1e-2).requires_grad_(), 1e-6), {}),
    "mhc_layer_pre_norm_fn_backward": _opcheck_norm_backward,
}
