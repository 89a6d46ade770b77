"""The v1 mHC autograd layer (kernelkiln.modeling.mhc) on the CPU.

* tile_kernels 1.0.0's names, signatures and defaults; argument errors name the argument (before the CUDA error).
* The compile path: every registered op pair traced forward and backward on fake tensors, and a whole block
  (expand, mhc_pre, mhc_post, mhc_head) traced by torch.compile(fullgraph=True) into one forward and one backward
  graph made of our ops only.
* The backward formulas the kernels implement (float64 closed forms) against torch.autograd.gradcheck, and the
  peer-semantics references' composition under gradcheck.
* The layer's wiring, run on the CPU with those closed forms standing in for the kernels: gradients against
  autograd of the peer-semantics references, the grad_from_mhc_post protocol (set, summed, removed), main_grad,
  the fixed mhc_head backward and the fixed no-grad mhc_pre (norm_weight).
"""
import inspect

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import kernelkiln.mhc
import kernelkiln.modeling
from kernelkiln.modeling import mhc
from kernelkiln.modeling.mhc import ops
from kernelkiln.modeling.mhc.ops import _common
from kernelkiln.modeling.mhc.ops import expand as ex
from kernelkiln.modeling.mhc.ops import head_compute_mix as hm
from kernelkiln.modeling.mhc.ops import norm_fn as nf
from kernelkiln.modeling.mhc.ops import post as po
from kernelkiln.modeling.mhc.ops import pre_apply_mix as am
from kernelkiln.modeling.mhc.ops import pre_big_fuse as bf
from kernelkiln.modeling.mhc.ops import pre_split_mixes as sm
from kernelkiln.modeling.mhc.ops import sinkhorn as sk
from kernelkiln.torch import (expand_to_mhc_ref, mhc_head_compute_mix_ref, mhc_post_ref, mhc_pre_apply_mix_ref,
                              mhc_pre_norm_fn_ref, mhc_pre_split_mixes_ref, sinkhorn_normalize_ref)

E = inspect.Parameter.empty
P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY

# tile_kernels 1.0.0's signatures (names, kinds, defaults), read in its modeling/mhc sources
V1_SIGNATURES = {
    ops.expand_to_mhc: [("hidden", P, E), ("mhc_mult", P, E), ("out", P, None)],
    ops.mhc_head_compute_mix: [("input_mix", P, E), ("mhc_scale", P, E), ("mhc_base", P, E), ("mhc_pre_eps", P, E)],
    ops.mhc_pre_split_mixes: [("input_mixes", P, E), ("mhc_scale", P, E), ("mhc_base", P, E), ("mhc_mult", P, E),
                              ("mhc_post_mult_value", P, E), ("mhc_pre_eps", P, E)],
    ops.sinkhorn_normalize: [("x", P, E), ("repeat", P, 10), ("eps", P, 1e-6)],
    ops.mhc_pre_apply_mix: [("x", P, E), ("mix", P, E), ("out", P, None)],
    ops.mhc_post: [("x", P, E), ("residual", P, E), ("post_layer_mix", P, E), ("comb_res_mix", P, E),
                   ("out", P, None)],
    ops.mhc_pre_norm_fn: [("residual", P, E), ("mhc_fn", P, E), ("mhc_norm_weight", P, E), ("mhc_norm_eps", P, E),
                          ("fuse_grad_acc", P, True), ("n_splits", P, 16)],
    ops.mhc_pre_big_fuse: [("residual", P, E), ("fn", P, E), ("mhc_scale", P, E), ("mhc_base", P, E),
                           ("rms_eps", P, E), ("mhc_pre_eps", P, E), ("mhc_sinkhorn_eps", P, E),
                           ("mhc_post_mult_value", P, E), ("sinkhorn_repeat", P, E), ("n_splits", P, 16)],
    ops.mhc_post_fwd: [("x", P, E), ("residual", P, E), ("post_layer_mix", P, E), ("comb_res_mix", P, E),
                       ("out", P, None)],
    ops.mhc_post_bwd: [("x", P, E), ("residual", P, E), ("post_layer_mix", P, E), ("comb_res_mix", P, E),
                       ("d_o", P, E), ("fuse_grad_acc", P, True)],
    ops.mhc_multilayer_recompute: [(n, P, E) for n in ("initial_residual", "pre_mix_list", "layer_output_list",
                                                       "post_mix_list", "comb_mix_list", "layer_input_list",
                                                       "residual_list")],
    mhc.expand_from_embedding: [("x", P, E), ("mhc_mult", P, 4)],
    mhc.mhc_pre: [("residual", P, E), ("fn", P, E), ("scale", P, E), ("base", P, E), ("norm_weight", K, None),
                  ("norm_eps", K, 1e-6), ("mhc_mult", K, 4), ("post_mult_value", K, 1.0), ("pre_eps", K, 1e-6),
                  ("sinkhorn_eps", K, 1e-6), ("sinkhorn_repeat", K, 10), ("n_splits", K, 16)],
    mhc.mhc_head: [("residual", P, E), ("fn", P, E), ("scale", P, E), ("base", P, E), ("norm_weight", K, None),
                   ("norm_eps", K, 1e-6), ("mhc_mult", K, 4), ("pre_eps", K, 1e-6), ("n_splits", K, 16)],
}


def _params(f):
    return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]


def test_v1_names_and_signatures():
    assert kernelkiln.modeling.mhc is mhc and mhc.ops is ops and "mhc" in kernelkiln.modeling.__all__
    assert sorted(ops.__all__) == sorted(f.__name__ for f in V1_SIGNATURES if f.__module__.startswith(
        ("kernelkiln.modeling.mhc.ops", "kernelkiln.mhc")))
    for f, want in V1_SIGNATURES.items():
        assert _params(f) == want, f.__name__
    for name in ("ExpandToMHCFn", "MHCHeadComputeMix", "MHCPreSplitMixes", "_SinkhornNormalize", "MHCPreApplyMix",
                 "MHCPost", "_MHCFnNormwMerge", "MHCPreNormFn"):
        owner = next(m for m in (ex, hm, sm, sk, am, po, nf) if hasattr(m, name))
        assert issubclass(getattr(owner, name), torch.autograd.Function), name


def test_signatures_agree_with_the_v1_wheel(peer_wheel):
    """The same table read from the 1.0.0 wheel's sources (ast: the peer's package is not imported)."""
    import ast
    site = peer_wheel("1.0.0")
    found = {}
    for path in [site / "tile_kernels/modeling/mhc/functional.py", *(site / "tile_kernels/modeling/mhc/ops").glob(
            "*.py"), site / "tile_kernels/mhc/post_kernel.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                a = node.args
                pos = [(x.arg, P) for x in a.args]
                defaults = [E] * (len(pos) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
                kw = [(x.arg, K, E if d is None else ast.literal_eval(d)) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
                found[node.name] = [(n, k, d) for (n, k), d in zip(pos, defaults)] + kw
    for f, want in V1_SIGNATURES.items():
        if f.__name__ in found:
            assert found[f.__name__] == want, f.__name__
    assert {"mhc_pre", "mhc_head", "mhc_post_bwd", "mhc_pre_norm_fn"} <= set(found)


# ------------------------------------------------------------------------------------------ inputs
A, B, M, H = 2, 3, 4, 64
M3 = M * (M + 2)


def _block_inputs(dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    t = {
        "emb": torch.randn(A, B, H, generator=g).bfloat16(),
        "fn": torch.randn(M3, M * H, generator=g) * 0.05,
        "scale": torch.randn(3, generator=g) * 0.1 + 1,
        "base": torch.randn(M3, generator=g) * 0.1,
        "normw": torch.rand(M * H, generator=g) + 0.5,
        "hfn": torch.randn(M, M * H, generator=g) * 0.05,
        "hscale": torch.randn(1, generator=g) * 0.1 + 1,
        "hbase": torch.randn(M, generator=g) * 0.1,
    }
    if grad:
        for v in t.values():
            v.requires_grad_()
    return t


def _residual():
    return torch.randn(A, B, M, H).bfloat16()


# ------------------------------------------------------------------------------------------ argument errors
def _err_cases():
    r, fn, sc, ba = _residual(), torch.randn(M3, M * H), torch.randn(3), torch.randn(M3)
    mix = torch.rand(A, B, M, 1)
    x = torch.randn(A, B, H).bfloat16()
    comb = torch.rand(A, B, M, M)
    return [
        (lambda: ops.expand_to_mhc(x.float(), 4), TypeError, "hidden has dtype"),
        (lambda: ops.expand_to_mhc(x.transpose(0, 1), 4), ValueError, "hidden must be contiguous"),
        (lambda: ops.expand_to_mhc(x, 4.0), TypeError, "mhc_mult must be a Python int"),
        (lambda: ops.expand_to_mhc(x, 4, torch.empty(A, B, 2, H).bfloat16()), ValueError, "out must have shape"),
        (lambda: ops.mhc_head_compute_mix(torch.rand(A * B, M), torch.rand(1), torch.rand(M), 1e-6), ValueError,
         "input_mix must be 3-D"),
        (lambda: ops.mhc_head_compute_mix(torch.rand(A, B, M), torch.rand(2), torch.rand(M), 1e-6), ValueError,
         r"mhc_scale must have shape \[1\]"),
        (lambda: ops.mhc_head_compute_mix(torch.rand(A, B, M), torch.rand(1), torch.rand(M + 1), 1e-6), ValueError,
         "mhc_base must have shape"),
        (lambda: ops.mhc_pre_split_mixes(torch.rand(A, B, M3 - 1), sc, ba, M, 1.0, 1e-6), ValueError,
         "input_mixes must be"),
        (lambda: ops.mhc_pre_split_mixes(torch.rand(A, B, M3), sc[:2], ba, M, 1.0, 1e-6), ValueError,
         "mhc_scale must have shape"),
        (lambda: ops.mhc_pre_split_mixes(torch.rand(A, B, M3), sc, ba, M, "1", 1e-6), TypeError,
         "mhc_post_mult_value must be a Python float"),
        (lambda: ops.sinkhorn_normalize(torch.rand(A, M, M + 1)), ValueError, "x must be"),
        (lambda: ops.sinkhorn_normalize(torch.rand(A, M, M), repeat=0), ValueError, "repeat must be >= 1"),
        (lambda: ops.sinkhorn_normalize(torch.rand(A, M, M).double()), TypeError, "x has dtype"),
        (lambda: ops.mhc_pre_apply_mix(r, torch.rand(A, B, M)), ValueError, r"mix must be \[\.\.\., mhc_mult, 1\]"),
        (lambda: ops.mhc_pre_apply_mix(r.float(), mix), TypeError, "x has dtype"),
        (lambda: ops.mhc_pre_apply_mix(r, mix, torch.empty(A, B, H + 8).bfloat16()), ValueError,
         "out must have shape"),
        (lambda: ops.mhc_post(x, r, mix, comb[..., :2]), ValueError, "comb_res_mix must have shape"),
        (lambda: ops.mhc_post(x.float(), r, mix, comb), TypeError, "x has dtype"),
        (lambda: ops.mhc_post_bwd(x, r, mix, comb, r, fuse_grad_acc=1), TypeError, "fuse_grad_acc must be a bool"),
        (lambda: ops.mhc_pre_norm_fn(r, fn[:, :-8], None, 1e-6), ValueError, "mhc_fn must be"),
        (lambda: ops.mhc_pre_norm_fn(r, fn, torch.rand(M * H + 1), 1e-6), ValueError, "mhc_norm_weight must have"),
        (lambda: ops.mhc_pre_norm_fn(r, fn.double(), None, 1e-6), TypeError, "mhc_fn has dtype"),
        (lambda: ops.mhc_pre_norm_fn(r, fn, None, 1e-6, fuse_grad_acc=None), TypeError, "fuse_grad_acc"),
        (lambda: ops.mhc_pre_norm_fn(r, fn, None, 1e-6, n_splits=0), ValueError, "n_splits must be >= 1"),
        (lambda: ops.mhc_pre_norm_fn(r, fn, None, "eps"), TypeError, "mhc_norm_eps must be a Python float"),
        (lambda: ops.mhc_pre_big_fuse(r, fn[:M], sc, ba, 1e-6, 1e-6, 1e-6, 1.0, 10), ValueError, "fn must have"),
        (lambda: ops.mhc_pre_big_fuse(r, fn, sc, ba[:3], 1e-6, 1e-6, 1e-6, 1.0, 10), ValueError,
         "mhc_base must have"),
        (lambda: mhc.mhc_pre(r, fn[:, :8], sc, ba), ValueError, "mhc_fn must be"),
        (lambda: mhc.mhc_head(r, fn[:M].double(), torch.rand(1), torch.rand(M)), TypeError, "fn has dtype"),
    ]


@pytest.mark.parametrize("case", range(len(_err_cases())))
def test_argument_errors_name_the_argument(case):
    call, exc, match = _err_cases()[case]
    with pytest.raises(exc, match=match):
        call()


def test_the_no_grad_mhc_pre_checks_norm_weight():
    with torch.no_grad(), pytest.raises(ValueError, match="mhc_norm_weight must have"):
        mhc.mhc_pre(_residual(), torch.randn(M3, M * H), torch.randn(3), torch.randn(M3),
                    norm_weight=torch.rand(M * H - 1))


@pytest.mark.parametrize("call", [
    lambda: ops.expand_to_mhc(torch.randn(A, B, H).bfloat16(), 4),
    lambda: ops.sinkhorn_normalize(torch.rand(A, M, M)),
    lambda: ops.mhc_pre_apply_mix(_residual(), torch.rand(A, B, M, 1)),
    lambda: ops.mhc_post(torch.randn(A, B, H).bfloat16(), _residual(), torch.rand(A, B, M, 1),
                         torch.rand(A, B, M, M)),
    lambda: ops.mhc_pre_split_mixes(torch.rand(A, B, M3), torch.rand(3), torch.rand(M3), M, 1.0, 1e-6),
    lambda: ops.mhc_head_compute_mix(torch.rand(A, B, M), torch.rand(1), torch.rand(M), 1e-6),
])
def test_cpu_tensors_get_the_projects_error(call):
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        call()


# ------------------------------------------------------------------------------------------ compile path
def test_every_op_pair_traces_forward_and_backward_on_fake_tensors():
    with FakeTensorMode():
        t = _block_inputs(grad=True)
        res = torch.randn(A, B, M, H).bfloat16().requires_grad_()
        fn = nf._merge_op(t["fn"], t["normw"])
        mixes, fn_tf32, out_mul, sqrsum = nf._norm_op(res, fn, 1e-6)
        assert mixes.shape == (A, B, M3) and mixes.dtype == torch.float32
        assert fn_tf32.shape == (M3, M * H) and out_mul.shape == (A * B, 1, M3) and sqrsum.shape == (A * B, 1)
        pre, post, comb = sm._split_op(mixes, t["scale"], t["base"], M, 2.0, 1e-6)
        assert pre.shape == post.shape == (A, B, M, 1) and comb.shape == (A, B, M, M)
        comb = sk._sinkhorn_op(comb.reshape(-1, M, M), 20, 1e-6).view(A, B, M, M)
        layer_input = am._apply_op(res, pre)
        assert layer_input.shape == (A, B, H) and layer_input.dtype == torch.bfloat16
        new = po._post_op(layer_input, res, post, comb)
        assert new.shape == res.shape and new.dtype == torch.bfloat16
        grads = torch.autograd.grad(new.float().sum(), (res, t["fn"], t["normw"], t["scale"], t["base"]))
        for g, like in zip(grads, (res, t["fn"], t["normw"], t["scale"], t["base"])):
            assert g.shape == like.shape and g.dtype == like.dtype
        hidden = torch.randn(A, B, H).bfloat16().requires_grad_()
        expanded = ex._expand_op(hidden, M)
        assert expanded.shape == (A, B, M, H)
        assert torch.autograd.grad(expanded.float().sum(), hidden)[0].shape == hidden.shape
        mix = hm._mix_op(mixes[..., :M], t["hscale"], t["hbase"], 1e-6)
        gm, gs, gb = torch.autograd.grad(mix.sum(), (mixes, t["hscale"], t["hbase"]), retain_graph=True)
        assert mix.shape == (A, B, M) and gs.shape == (1,) and gb.shape == (M,) and gm.shape == mixes.shape


def test_the_fakes_check_their_arguments():
    with FakeTensorMode():
        with pytest.raises(ValueError, match="mix must be"):
            am._apply_op(_residual(), torch.rand(A, B, M))
        with pytest.raises(ValueError, match="mhc_fn must be"):
            nf._norm_op(_residual(), torch.rand(M3, 8), 1e-6)


def _trace_block(block, args):
    """(forward graph code, backward graph code) of torch.compile(block, fullgraph=True), compiled only."""
    from torch._dynamo.backends.common import aot_autograd
    graphs = {}

    class Traced(Exception):
        pass

    def forward_compiler(gm, _):
        graphs["forward"] = gm.code
        return gm

    def backward_compiler(gm, _):
        graphs["backward"] = gm.code
        raise Traced()

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=aot_autograd(fw_compiler=forward_compiler,
                                                                         bw_compiler=backward_compiler))
    old = torch._functorch.config.force_non_lazy_backward_lowering
    torch._functorch.config.force_non_lazy_backward_lowering = True
    try:
        with pytest.raises(Exception) as info:
            compiled(*args)
        assert "Traced" in repr(info.value) or isinstance(info.value, Traced), info.value
    finally:
        torch._functorch.config.force_non_lazy_backward_lowering = old
        torch._dynamo.reset()
    return graphs["forward"], graphs["backward"]


def test_a_block_compiles_with_fullgraph_into_our_ops():
    def block(emb, fn, scale, base, normw, hfn, hscale, hbase):
        residual = mhc.expand_from_embedding(emb, 4)
        layer_input, (post, comb) = mhc.mhc_pre(residual, fn, scale, base, norm_weight=normw, post_mult_value=2.0,
                                                sinkhorn_repeat=20)
        residual = ops.mhc_post(layer_input * 2, residual, post, comb)
        return mhc.mhc_head(residual, hfn, hscale, hbase)

    forward, backward = _trace_block(block, list(_block_inputs(grad=True).values()))
    names = ("expand", "fn_normw_merge", "pre_norm_fn", "pre_split_mixes", "sinkhorn", "pre_apply_mix", "post",
             "head_compute_mix")
    for name in names:
        assert f"kernelkiln.mhc_layer_{name}.default" in forward, name
        assert f"kernelkiln.mhc_layer_{name}_backward.default" in backward, name


# ------------------------------------------------------------------------------------------ float64 formulas
# The backward formulas of the kernels the layer calls, in closed form (the kernels' math, not their order). They
# are checked against numerical derivatives here and stand in for the kernels in the wiring tests below.
def _sig(z):
    return torch.sigmoid(z)


def head_fwd(x, s, b, eps):
    return _sig(x * s + b) + eps


def head_bwd(g, x, s, b):
    p = _sig(x * s + b)
    gz = p * (1 - p) * g
    return gz * s, (gz * x).sum().reshape(1), gz.sum(0)


def _cols(scale, m):
    return scale[(torch.arange(m * (m + 2)) // m).clamp(max=2)]


def split_fwd(x, s, b, m, mult, eps):
    pre, post, comb = mhc_pre_split_mixes_ref(x.unsqueeze(0), s, b, m, mult, eps)
    return pre[0, ..., 0], post[0, ..., 0], comb[0].flatten(1)


def split_bwd(gp, gq, gc, x, post, s, b, mult):
    m = gp.shape[1]
    z = x * _cols(s, m) + b
    p = _sig(z[:, :m])
    gz = torch.cat([gp * p * (1 - p), gq * post * (1 - post / mult), gc], 1)
    group = (torch.arange(m * (m + 2)) // m).clamp(max=2)
    sg = torch.zeros(3, dtype=x.dtype).index_add_(0, group, (gz * x).sum(0))
    return gz * _cols(s, m), sg, gz.sum(0)


def apply_fwd(x, mix):
    return (mix.unsqueeze(-1) * x).sum(1)


def apply_bwd(og, x, mix):
    return mix.unsqueeze(-1) * og.unsqueeze(1), (og.unsqueeze(1) * x).sum(-1)


def post_fwd(x, res, post, comb):
    return post.unsqueeze(-1) * x.unsqueeze(1) + torch.einsum("nio,nih->noh", comb, res)


def post_bwd(x, res, post, comb, do):
    return ((post.unsqueeze(-1) * do).sum(1), torch.einsum("nio,noh->nih", comb, do),
            (x.unsqueeze(1) * do).sum(-1), torch.einsum("nih,noh->nio", res, do))


def norm_fwd(x, fn, eps):
    """x [n, K], fn [m3, K] -> (out, out_mul, sqrsum)."""
    om, sq = x @ fn.t(), x.square().sum(-1, keepdim=True)
    return om * torch.rsqrt(sq / x.shape[1] + eps), om, sq


def norm_bwd(g, x, fn, om, sq, eps):
    k = x.shape[1]
    r = torch.rsqrt(sq / k + eps)
    omg = g * r
    sqg = ((g * om).sum(-1, keepdim=True) * r / (sq + eps * k)) / -2
    return omg @ fn + 2 * x * sqg, omg.t() @ x


def merge_bwd(g, fn, w):
    return g * w, (g * fn).sum(0)


def _closed_form(fwd, bwd, n_tensors, save):
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            out = fwd(*args)
            ctx.save_for_backward(*args[:n_tensors])
            ctx.rest = args[n_tensors:]
            ctx.out = out
            return out

        @staticmethod
        def backward(ctx, *grads):
            return (*save(ctx, grads), *([None] * len(ctx.rest)))
    return F.apply


CLOSED_FORMS = {
    "head_compute_mix": (_closed_form(head_fwd, None, 3, lambda c, g: head_bwd(g[0], *c.saved_tensors)),
                         lambda d: (torch.randn(5, 4, dtype=d), torch.randn(1, dtype=d), torch.randn(4, dtype=d),
                                    1e-6)),
    "pre_split_mixes": (_closed_form(split_fwd, None, 3, lambda c, g: split_bwd(
        *g, c.saved_tensors[0], c.out[1].detach(), *c.saved_tensors[1:], c.rest[1])),
        lambda d: (torch.randn(5, 24, dtype=d), torch.rand(3, dtype=d) + 0.5, torch.randn(24, dtype=d), 4, 2.0,
                   1e-6)),
    "pre_apply_mix": (_closed_form(apply_fwd, None, 2, lambda c, g: apply_bwd(g[0], *c.saved_tensors)),
                      lambda d: (torch.randn(5, 4, 8, dtype=d), torch.rand(5, 4, dtype=d))),
    "post": (_closed_form(post_fwd, None, 4, lambda c, g: post_bwd(*c.saved_tensors, g[0])),
             lambda d: (torch.randn(5, 8, dtype=d), torch.randn(5, 4, 8, dtype=d), torch.rand(5, 4, dtype=d),
                        torch.rand(5, 4, 4, dtype=d))),
    "pre_norm_fn": (_closed_form(lambda x, fn, eps: norm_fwd(x, fn, eps)[0], None, 2, lambda c, g: norm_bwd(
        g[0], *c.saved_tensors, *norm_fwd(*c.saved_tensors, c.rest[0])[1:], c.rest[0])),
        lambda d: (torch.randn(5, 32, dtype=d), torch.randn(24, 32, dtype=d), 1e-2)),
    "fn_normw_merge": (_closed_form(lambda fn, w: fn * w, None, 2, lambda c, g: merge_bwd(g[0], *c.saved_tensors)),
                       lambda d: (torch.randn(6, 8, dtype=d), torch.randn(8, dtype=d))),
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_the_kernels_backward_formulas_pass_gradcheck(name):
    f, inputs = CLOSED_FORMS[name]
    args = [a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in inputs(torch.float64)]
    assert torch.autograd.gradcheck(f, args)


def test_a_wrong_formula_fails_gradcheck():
    """The check above can fail: the norm backward without its -1/2 is caught."""
    def bad(g, x, fn, om, sq, eps):
        gx, gfn = norm_bwd(g, x, fn, om, sq, eps)
        return gx - 2 * x * (((g * om).sum(-1, keepdim=True) * torch.rsqrt(sq / x.shape[1] + eps)
                              / (sq + eps * x.shape[1])) / -2) * 3, gfn
    f = _closed_form(lambda x, fn, eps: norm_fwd(x, fn, eps)[0], None, 2, lambda c, g: bad(
        g[0], *c.saved_tensors, *norm_fwd(*c.saved_tensors, c.rest[0])[1:], c.rest[0]))
    args = (torch.randn(5, 32, dtype=torch.float64).requires_grad_(),
            torch.randn(24, 32, dtype=torch.float64).requires_grad_(), 1e-2)
    assert not torch.autograd.gradcheck(f, args, raise_exception=False)


def test_the_references_composition_passes_gradcheck():
    """expand -> split mixes -> Sinkhorn -> (head mix) of the peer-semantics references, float64; the float32/bf16
    references (norm_fn, apply-mix, post) enter through their float64 closed forms above."""
    def chain(hidden, mixes, scale, base, hscale, hbase):
        streams = expand_to_mhc_ref(hidden, 4)
        pre, post, comb = mhc_pre_split_mixes_ref(mixes, scale, base, 4, 2.0, 1e-6)
        comb = sinkhorn_normalize_ref(comb, repeat=5, eps=1e-6)
        head = mhc_head_compute_mix_ref(mixes[..., :4], hscale, hbase, 1e-6)
        mixed = (streams * (pre + head.unsqueeze(-1))).sum(-2)
        return mixed, torch.einsum("abio,abih->aboh", comb, streams) + post * mixed.unsqueeze(-2)
    d = torch.float64
    args = [torch.randn(2, 3, 8, dtype=d), torch.randn(2, 3, 24, dtype=d), torch.rand(3, dtype=d) + 0.5,
            torch.randn(24, dtype=d), torch.rand(1, dtype=d), torch.randn(4, dtype=d)]
    assert torch.autograd.gradcheck(chain, [a.requires_grad_() for a in args])


# ------------------------------------------------------------------------------------------ wiring on the CPU
def _bf16_acc(buf, add):
    buf.copy_((buf.float() + add.float()).bfloat16())


@pytest.fixture
def cpu_kernels(monkeypatch):
    """The layer's kernels replaced by the float32 closed forms above (bf16 results rounded once), so the Functions'
    wiring runs on the CPU."""
    f32 = torch.float32

    def expand_fwd(x, o):
        o.copy_(x.unsqueeze(1).expand_as(o))

    def expand_bwd(og, xg):
        xg.copy_(og.float().sum(1).bfloat16())

    def head_f(x, s, b, out, eps, token_block_size=0):
        out.copy_(head_fwd(x, s, b, eps))

    def head_b(og, x, s, b, ig, sp, bp, num_sms, token_block_size=0):
        gi, gs, gb = head_bwd(og, x, s, b)
        ig.copy_(gi)
        sp.zero_()
        bp.zero_()
        sp[0], bp[0] = gs, gb

    def split_f(x, s, b, pre, post, comb, mult, eps):
        for o, v in zip((pre, post, comb), split_fwd(x, s, b, pre.shape[1], mult, eps)):
            o.copy_(v)

    def split_b(gp, gq, gc, x, post, s, b, ig, sg, bg, mult):
        for o, v in zip((ig, sg, bg), split_bwd(gp, gq, gc, x, post, s, b, mult)):
            o.copy_(v)

    def sink_f(x, out, repeat, eps):
        out.copy_(sinkhorn_normalize_ref(x, repeat, eps))

    def sink_b(g, x, gi, repeat, eps):
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            gi.copy_(torch.autograd.grad(sinkhorn_normalize_ref(xx, repeat, eps), xx, g)[0])

    def apply_f(x, mix, o):
        o.copy_(apply_fwd(x.float(), mix).bfloat16())

    def apply_b(og, x, mix, xg):
        gx, gm = apply_bwd(og.float(), x.float(), mix)
        _bf16_acc(xg, gx)
        return gm

    def post_f(x, res, post, comb, out=None):
        b_, s_, m_, h_ = res.shape
        y = post_fwd(x.float().view(-1, h_), res.float().view(-1, m_, h_), post.view(-1, m_),
                     comb.view(-1, m_, m_)).bfloat16().view(res.shape)
        if out is None:
            return y
        out.copy_(y)
        return out

    def post_b(x, res, post, comb, do):
        m_, h_ = res.shape[-2:]
        gx, gr, gp, gc = post_bwd(x.float().view(-1, h_), res.float().view(-1, m_, h_), post.view(-1, m_),
                                  comb.view(-1, m_, m_), do.float().view(-1, m_, h_))
        return (gx.bfloat16().view(x.shape), gr.bfloat16().view(res.shape), gp.view(post.shape),
                gc.view(comb.shape))

    def merge_f(fn, w, out):
        out.copy_(fn * w)

    def merge_b(fn, w, g, fg, wg):
        a, b_ = merge_bwd(g, fn, w)
        fg.add_(a)
        wg.add_(b_)

    def mul_f(x, fn, out_mul, sqrsum):
        xf = x.float()
        out_mul.copy_((xf @ fn.t()).unsqueeze(1))
        sqrsum.copy_(xf.square().sum(-1, keepdim=True))

    def mul_b(omg, sqg, x, fn, xg, fg):
        xf = x.float()
        _bf16_acc(xg, omg[:, 0] @ fn + 2 * xf * sqg)
        fg.copy_(omg[:, 0].t() @ xf)

    def reduce_f(oms, sqs, om, sq, out, gs, eps, n_splits):
        om.copy_(oms.sum(0))
        sq.copy_(sqs.sum(0))
        out.copy_(om[:, 0] * torch.rsqrt(sq / gs + eps))

    def reduce_b(g, om, sq, omg, sqg, gs, eps):
        r = torch.rsqrt(sq / gs + eps)
        omg.copy_(g.unsqueeze(1) * r.unsqueeze(-1))
        sqg.copy_(((g * om[:, 0]).sum(-1, keepdim=True) * r / (sq + eps * gs)) / -2)

    def big_fuse(gom, gsq, s, b, res, post, comb, li, rms_eps, pre_eps, sk_eps, mult, repeat, n_splits=16):
        n, m_, h_ = res.shape
        mixes = gom.sum(0) * torch.rsqrt(gsq.sum(0).unsqueeze(-1) / (m_ * h_) + rms_eps)
        pre, p, c = split_fwd(mixes, s, b, m_, mult, pre_eps)
        post.copy_(p)
        comb.copy_(sinkhorn_normalize_ref(c.view(n, m_, m_), repeat, sk_eps).flatten(1))
        li.copy_(apply_fwd(res.float(), pre).bfloat16())

    for module, name, f in [(ex, "expand_to_mhc_fwd", expand_fwd), (ex, "expand_to_mhc_bwd", expand_bwd),
                            (hm, "mhc_head_compute_mix_fwd", head_f), (hm, "mhc_head_compute_mix_bwd", head_b),
                            (sm, "mhc_pre_split_mixes_fwd", split_f), (sm, "mhc_pre_split_mixes_bwd", split_b),
                            (sk, "mhc_sinkhorn_fwd", sink_f), (sk, "mhc_sinkhorn_bwd", sink_b),
                            (am, "mhc_pre_apply_mix_fwd", apply_f), (am, "mhc_pre_apply_mix_bwd", apply_b),
                            (po, "mhc_post_fwd", post_f), (po, "_post_bwd_21", post_b),
                            (nf, "mhc_fn_normw_merge_fwd", merge_f), (nf, "mhc_fn_normw_merge_bwd", merge_b),
                            (nf, "mhc_reduce_partials_and_rmsnorm_fwd", reduce_f),
                            (nf, "mhc_reduce_partials_and_rmsnorm_bwd", reduce_b),
                            (bf, "mhc_pre_big_fuse_fwd", big_fuse), (kernelkiln.mhc, "mhc_fn_normw_merge_fwd", merge_f)]:
        monkeypatch.setattr(module, name, f)
    monkeypatch.setattr(kernelkiln.mhc, "mhc_pre_norm_fn_fwd_mul", mul_f, raising=False)
    monkeypatch.setattr(kernelkiln.mhc, "mhc_pre_norm_fn_bwd_mul", mul_b, raising=False)
    monkeypatch.setattr(nf, "_tf32", lambda: (lambda t: t.clone()))
    monkeypatch.setattr(kernelkiln.config, "get_num_sms", lambda: 3)
    del f32


def _ref_block(t, residual_from_emb=True):
    residual = expand_to_mhc_ref(t["emb"], 4)
    mixes = mhc_pre_norm_fn_ref(residual, t["fn"], t["normw"], 1e-6)
    pre, post, comb = mhc_pre_split_mixes_ref(mixes, t["scale"], t["base"], 4, 2.0, 1e-6)
    comb = sinkhorn_normalize_ref(comb, repeat=20, eps=1e-6)
    layer_input = mhc_pre_apply_mix_ref(residual, pre)
    residual = mhc_post_ref(layer_input * 2, residual, post, comb)
    hfn = torch.nn.functional.pad(t["hfn"], (0, 0, 0, M3 - M))
    hmix = mhc_head_compute_mix_ref(mhc_pre_norm_fn_ref(residual, hfn, None, 1e-6)[..., :M], t["hscale"],
                                    t["hbase"], 1e-6)
    return mhc_pre_apply_mix_ref(residual, hmix.unsqueeze(-1))


def _our_block(t):
    residual = mhc.expand_from_embedding(t["emb"], 4)
    layer_input, (post, comb) = mhc.mhc_pre(residual, t["fn"], t["scale"], t["base"], norm_weight=t["normw"],
                                            post_mult_value=2.0, sinkhorn_repeat=20)
    residual = ops.mhc_post(layer_input * 2, residual, post, comb)
    return mhc.mhc_head(residual, t["hfn"], t["hscale"], t["hbase"])


def test_block_gradients_match_autograd_of_the_references(cpu_kernels):
    ours, ref = _block_inputs(grad=True), _block_inputs(grad=True)
    out = _our_block(ours)
    expected = _ref_block(ref)
    go = torch.randn(out.shape).bfloat16()
    out.backward(go)
    expected.backward(go)
    torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=2e-2)
    for name in ours:
        assert ours[name].grad is not None, name
        torch.testing.assert_close(ours[name].grad.float(), ref[name].grad.float(), rtol=3e-2, atol=3e-2,
                                   msg=lambda m: f"{name}: {m}")


def test_the_residual_gradient_protocol(cpu_kernels):
    """mhc_post's backward leaves d_residual on the residual's storage; apply-mix and norm_fn add into it, norm_fn
    removes it, and the residual's gradient is that buffer holding the three contributions."""
    t = _block_inputs()
    residual = _residual().requires_grad_()
    layer_input, (post, comb) = mhc.mhc_pre(residual, t["fn"], t["scale"], t["base"])
    seen = {}

    def at_layer_input_grad(_):  # after MHCPost's backward, before MHCPreApplyMix's
        buffer = getattr(residual.untyped_storage(), _common.GRAD_ATTR, None)
        seen["buffer"], seen["d_residual"] = buffer, None if buffer is None else buffer.clone()

    layer_input.register_hook(at_layer_input_grad)
    new = ops.mhc_post(layer_input, residual, post, comb)
    d_o = torch.randn(new.shape).bfloat16()
    new.backward(d_o)
    assert seen["buffer"] is not None
    assert not hasattr(residual.untyped_storage(), _common.GRAD_ATTR)
    _, d_residual, _, _ = ops.mhc_post_bwd(layer_input.detach(), residual.detach(), post.detach(), comb.detach(),
                                           d_o, fuse_grad_acc=False)
    assert torch.equal(seen["d_residual"], d_residual)
    assert torch.equal(residual.grad, seen["buffer"])
    assert not torch.equal(residual.grad, d_residual)  # the two other contributions were added


def test_mhc_post_bwd_sets_the_attribute_only_when_asked(cpu_kernels):
    x, r = torch.randn(A, B, H).bfloat16(), _residual()
    post, comb, d_o = torch.rand(A, B, M, 1), torch.rand(A, B, M, M), torch.randn(A, B, M, H).bfloat16()
    ops.mhc_post_bwd(x, r, post, comb, d_o, fuse_grad_acc=False)
    assert not hasattr(r.untyped_storage(), _common.GRAD_ATTR)
    _, d_residual, _, _ = ops.mhc_post_bwd(x, r, post, comb, d_o)
    assert getattr(r.untyped_storage(), _common.GRAD_ATTR) is d_residual
    _common.clear_fused_buffer(r)


def test_fused_and_returned_residual_gradients_agree(cpu_kernels):
    """The fused protocol (eager default) and explicit returns give the same residual gradient to bf16 rounding,
    and the explicit one is what the compile path computes."""
    t = _block_inputs()
    res = torch.randn(A, B, M, H).bfloat16()
    d_o = torch.randn(A, B, M, H).bfloat16()

    def run(fuse):
        r = res.clone().requires_grad_()
        mixes = ops.mhc_pre_norm_fn(r, t["fn"], None, 1e-6, fuse_grad_acc=fuse)
        pre, post, comb = ops.mhc_pre_split_mixes(mixes, t["scale"], t["base"], 4, 2.0, 1e-6)
        comb = ops.sinkhorn_normalize(comb, repeat=20)
        li = ops.mhc_pre_apply_mix(r, pre)
        ops.mhc_post(li, r, post, comb).backward(d_o)
        return r.grad, r

    fused, r_fused = run(True)
    returned, r_returned = run(False)
    assert not hasattr(r_fused.untyped_storage(), _common.GRAD_ATTR)
    torch.testing.assert_close(fused.float(), returned.float(), rtol=2e-2, atol=2e-2)
    assert not torch.equal(fused, torch.zeros_like(fused))
    _common.clear_fused_buffer(r_returned)


def test_fuse_grad_acc_needs_the_buffer(cpu_kernels):
    r = _residual().requires_grad_()
    mixes = ops.mhc_pre_norm_fn(r, torch.randn(M3, M * H), None, 1e-6)
    with pytest.raises(RuntimeError, match="grad_from_mhc_post"):
        mixes.sum().backward()


def test_apply_mix_accumulates_into_the_buffer_and_returns_none(cpu_kernels):
    r = _residual().requires_grad_()
    mix = torch.rand(A, B, M, 1, requires_grad=True)
    out = ops.mhc_pre_apply_mix(r, mix)
    buffer = torch.ones(r.shape).bfloat16()
    _common.set_fused_buffer(r, buffer)
    og = torch.randn(out.shape).bfloat16()
    out.backward(og)
    assert r.grad is None and mix.grad is not None
    torch.testing.assert_close(buffer.float(), 1 + (mix * og.float().unsqueeze(-2)), rtol=1e-2, atol=1e-2)
    _common.clear_fused_buffer(r)


def test_main_grad_of_the_merge(cpu_kernels):
    t = _block_inputs(grad=True)
    r = _residual()
    plain = ops.mhc_pre_norm_fn(r, t["fn"], t["normw"], 1e-6, fuse_grad_acc=False)
    g = torch.randn(plain.shape)
    plain.backward(g)
    fn, w = t["fn"].detach().clone().requires_grad_(), t["normw"].detach().clone().requires_grad_()
    fn.main_grad, w.main_grad = torch.full(fn.shape, 1.0), torch.full(w.shape, -2.0)
    ops.mhc_pre_norm_fn(r, fn, w, 1e-6, fuse_grad_acc=False).backward(g)
    assert fn.grad is None and w.grad is None
    torch.testing.assert_close(fn.main_grad - 1.0, t["fn"].grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.main_grad + 2.0, t["normw"].grad, rtol=1e-5, atol=1e-5)


def test_mhc_head_trains_without_an_mhc_post(cpu_kernels):
    """1.0.0's mhc_head backward needed a buffer nothing planted; here its residual gradient is returned."""
    t = _block_inputs(grad=True)
    r = _residual().requires_grad_()
    out = mhc.mhc_head(r, t["hfn"], t["hscale"], t["hbase"], norm_weight=t["normw"])
    out.float().sum().backward()
    assert r.grad is not None and r.grad.abs().sum() > 0 and t["hfn"].grad.shape == (M, M * H)
    assert not hasattr(r.untyped_storage(), _common.GRAD_ATTR)


def test_no_grad_mhc_pre_uses_norm_weight(cpu_kernels):
    """The fused inference path folds norm_weight into fn (1.0.0 ignored it): it agrees with the training path."""
    t = _block_inputs()
    r = _residual()
    t["normw"] = torch.rand(M * H) * 3
    with torch.enable_grad():
        rr = r.clone().requires_grad_()
        train, (post, comb) = mhc.mhc_pre(rr, t["fn"], t["scale"], t["base"], norm_weight=t["normw"],
                                          post_mult_value=2.0, sinkhorn_repeat=20)
    with torch.no_grad():
        evaluated, (post_e, comb_e) = mhc.mhc_pre(r, t["fn"], t["scale"], t["base"], norm_weight=t["normw"],
                                                  post_mult_value=2.0, sinkhorn_repeat=20)
        unweighted, (post_u, _) = mhc.mhc_pre(r, t["fn"], t["scale"], t["base"], post_mult_value=2.0,
                                              sinkhorn_repeat=20)
    assert post_e.shape == (A, B, M, 1) and comb_e.shape == (A, B, M, M) and evaluated.shape == (A, B, H)
    torch.testing.assert_close(post_e, post.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(comb_e, comb.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(evaluated.float(), train.detach().float(), rtol=1e-2, atol=1e-2)
    assert not torch.allclose(post_u, post_e, rtol=1e-4, atol=1e-4)


def test_the_no_grad_mhc_pre_compiles_with_fullgraph():
    """The inference path (norm weight folded in, TF32 GEMM, big fuse) traces into the 2.1 ops only."""
    from torch._dynamo.backends.common import aot_autograd
    graphs = {}

    class Traced(Exception):
        pass

    def compiler(gm, _):
        graphs["forward"] = gm.code
        raise Traced()

    def pre(residual, fn, scale, base, normw):
        return mhc.mhc_pre(residual, fn, scale, base, norm_weight=normw, post_mult_value=2.0, sinkhorn_repeat=20)

    t = _block_inputs()
    torch._dynamo.reset()
    compiled = torch.compile(pre, fullgraph=True, backend=aot_autograd(fw_compiler=compiler))
    try:
        with torch.no_grad(), pytest.raises(Exception, match="Traced"):
            compiled(_residual(), t["fn"], t["scale"], t["base"], t["normw"])
    finally:
        torch._dynamo.reset()
    for name in ("mhc_fn_normw_merge_fwd", "mhc_pre_norm_fn_fwd_mul", "mhc_pre_big_fuse_fwd"):
        assert f"kernelkiln.{name}" in graphs["forward"], name
    assert "mhc_layer_" not in graphs["forward"]
