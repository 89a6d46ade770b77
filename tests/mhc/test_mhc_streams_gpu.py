"""The mHC stream ops on the GPU: bit-identical to our ordered references (kernelkiln.torch.mhc_streams) on the
peer's test shapes (its upstream tests), within the peer's tolerances of its own references, multilayer recompute bit
for bit against the chain of our own pre_apply_mix_fwd + post_fwd kernels, special values and n = 0."""
import pytest
import torch

import kernelkiln
from bitwise import assert_bitwise
from kernelkiln._ops.launch import has_variant
from kernelkiln.torch import (expand_to_mhc_bwd_ref, expand_to_mhc_ref, mhc_post_bwd_ref, mhc_post_fwd_ref,
                              mhc_post_ref, mhc_pre_apply_mix_bwd_ref, mhc_pre_apply_mix_fwd_ref,
                              mhc_pre_apply_mix_ref)
from kernelkiln_contract import mhc_streams as C

pytestmark = pytest.mark.gpu
M = kernelkiln.mhc
SPECIAL = [float("inf"), float("-inf"), float("nan"), -0.0, 3.0e38]
MULTILAYER = [(1, 1, 2560), (3, 2, 2560), (3, 3, 2560), (10, 9, 2560), (10, 10, 2560), (10, 9, 4096),
              (10, 10, 4096), (10, 9, 7168), (10, 10, 7168), (10, 9, 8192), (10, 10, 8192)]


def _need(contract, m):
    if not has_variant(contract, contract.key(mhc_mult=m), 0):
        pytest.skip(f"{contract.op} with mhc_mult={m} is not in this build's manifest")


def calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else ((x - y) ** 2).sum().item() / den.item()


def _poison(shape, dtype):
    t = torch.empty(shape, dtype=dtype, device="cuda")
    t.view(torch.uint8).fill_(0xFF)  # NaN in bf16 and fp32
    return t


def _nan_aware(actual, expected, what):
    """Bitwise except that any NaN matches any NaN."""
    a, e = actual.float(), expected.float()
    assert torch.equal(a.isnan(), e.isnan()), f"{what}: NaN positions differ"
    keep = ~a.isnan()
    assert_bitwise(actual[keep], expected[keep], what)


def _streams(n, m, h):
    return (torch.randn(n, m, h, device="cuda") * (1 + 0.01 * torch.arange(m, device="cuda")).view(m, 1)).bfloat16()


def _mix(n, m):
    return torch.softmax(torch.randn(n, m, device="cuda"), -1)


def _post_inputs(a, b, m, h):
    x = torch.randn(a, b, h, device="cuda").bfloat16()
    res = _streams(a * b, m, h).view(a, b, m, h)
    post = torch.sigmoid(torch.randn(a, b, m, 1, device="cuda")) * 2
    comb = torch.softmax(torch.randn(a, b, m, m, device="cuda"), -1)
    return x, res, post, comb


# ---------------------------------------------------------------------------------------------------- opcheck
def _opcheck_expand_fwd():
    return (torch.randn(33, 256, device="cuda").bfloat16(), _poison((33, 4, 256), torch.bfloat16)), {}


def _opcheck_expand_bwd():
    return (_streams(33, 4, 256), _poison((33, 256), torch.bfloat16)), {}


def _opcheck_apply_fwd():
    return (_streams(17, 4, 512), _mix(17, 4), _poison((17, 512), torch.bfloat16)), {}


def _opcheck_apply_bwd():
    return (torch.randn(17, 512, device="cuda").bfloat16(), _streams(17, 4, 512), _mix(17, 4),
            _streams(17, 4, 512)), {}


def _opcheck_post_fwd():
    return _post_inputs(1, 9, 4, 256), {}


def _opcheck_post_fwd_out():
    return (*_post_inputs(1, 9, 4, 256), _poison((1, 9, 4, 256), torch.bfloat16)), {}


def _opcheck_post_bwd():
    return (*_post_inputs(1, 9, 4, 256), torch.randn(1, 9, 4, 256, device="cuda").bfloat16()), {}


def _chain_inputs(n, m, h, layers, posts):
    r0 = _streams(n, m, h)
    pre = [torch.sigmoid(torch.randn(n, m, 1, device="cuda")) + 1e-6 for _ in range(layers)]
    out = [torch.randn(n, h, device="cuda").bfloat16() for _ in range(posts)]
    post = [torch.sigmoid(torch.randn(n, m, device="cuda")) * 2 for _ in range(posts)]
    comb = [torch.softmax(torch.randn(n, m, m, device="cuda"), -1) for _ in range(posts)]
    return r0, pre, out, post, comb


def _opcheck_multilayer():
    r0, pre, out, post, comb = _chain_inputs(9, 4, 256, 3, 2)
    li = [_poison((9, 256), torch.bfloat16) for _ in range(3)]
    rl = [_poison((9, 4, 256), torch.bfloat16) for _ in range(2)]
    return (r0, pre, out, post, comb, li, rl), {}


OPCHECK_CASES = {"expand_to_mhc_fwd": _opcheck_expand_fwd, "expand_to_mhc_bwd": _opcheck_expand_bwd,
                 "mhc_pre_apply_mix_fwd": _opcheck_apply_fwd, "mhc_pre_apply_mix_bwd": _opcheck_apply_bwd,
                 "mhc_post_fwd": _opcheck_post_fwd, "mhc_post_fwd_out": _opcheck_post_fwd_out,
                 "mhc_post_bwd": _opcheck_post_bwd, "mhc_multilayer_recompute": _opcheck_multilayer}


# ---------------------------------------------------------------------------------------------------- expand
@pytest.mark.parametrize("h", [1280, 2560, 7168, 8])
@pytest.mark.parametrize("n", [0, 1, 512, 8001])
@pytest.mark.parametrize("m", [4, 2, 8])
def test_expand_bitwise(seed, n, h, m):
    _need(C.EXPAND_TO_MHC_FWD, m)
    _need(C.EXPAND_TO_MHC_BWD, m)
    x = torch.randn(n, h, device="cuda").bfloat16()
    if n:
        x.view(-1)[:len(SPECIAL)] = torch.tensor(SPECIAL, device="cuda").bfloat16()
    o = _poison((n, m, h), torch.bfloat16)
    assert M.expand_to_mhc_fwd(x, o) is None
    assert_bitwise(o, expand_to_mhc_ref(x, m), "expand_to_mhc_fwd")  # a copy: NaN payloads too
    og = _streams(n, m, h)
    if n:
        og.view(-1)[:len(SPECIAL)] = torch.tensor(SPECIAL, device="cuda").bfloat16()
    xg = _poison((n, h), torch.bfloat16)
    assert M.expand_to_mhc_bwd(og, xg) is None
    _nan_aware(xg, expand_to_mhc_bwd_ref(og), "expand_to_mhc_bwd")


# ---------------------------------------------------------------------------------------------------- pre apply mix
@pytest.mark.parametrize("h", [1280, 2560, 7680])
@pytest.mark.parametrize("n1", [1024, 4096])
@pytest.mark.parametrize("n0", [1, 2])
def test_pre_apply_mix_fwd_bitwise(seed, n0, n1, h):
    m, n = 4, n0 * n1
    x = torch.sigmoid(torch.randn(n, m, h, device="cuda")).bfloat16()
    mix = _mix(n, m)
    o = _poison((n, h), torch.bfloat16)
    assert M.mhc_pre_apply_mix_fwd(x, mix, o) is None
    assert_bitwise(o, mhc_pre_apply_mix_fwd_ref(x, mix), "mhc_pre_apply_mix_fwd")
    want = mhc_pre_apply_mix_ref(x, mix.unsqueeze(-1))
    assert torch.allclose(o.float(), want.float(), atol=1e-2, rtol=1e-3)  # the peer's test tolerance


@pytest.mark.parametrize("h", [1280, 2560, 7680])
@pytest.mark.parametrize("n1", [1024, 4096])
@pytest.mark.parametrize("n0", [1, 2])
def test_pre_apply_mix_bwd_bitwise(seed, n0, n1, h):
    m, n = 4, n0 * n1
    x = torch.sigmoid(torch.randn(n, m, h, device="cuda")).bfloat16()
    mix = _mix(n, m)
    og = torch.randn(n, h, device="cuda").bfloat16()
    xg = torch.randn(n, m, h, device="cuda").bfloat16()
    want_xg = xg.clone()
    want_mg = mhc_pre_apply_mix_bwd_ref(og, x, mix, want_xg)
    mg = M.mhc_pre_apply_mix_bwd(og, x, mix, xg)
    assert_bitwise(xg, want_xg, "x_grad (accumulated)")
    assert_bitwise(mg, want_mg, "mix_grad")
    # against autograd of the peer-semantics reference
    xf, wf = x.float().requires_grad_(), mix.unsqueeze(-1).clone().requires_grad_()
    mhc_pre_apply_mix_ref(xf, wf).backward(og.float())
    assert calc_diff(mg, wf.grad.squeeze(-1)) < 1e-6


@pytest.mark.parametrize("m", [2, 8])
def test_pre_apply_mix_other_stream_counts(seed, m):
    _need(C.MHC_PRE_APPLY_MIX_FWD, m)
    _need(C.MHC_PRE_APPLY_MIX_BWD, m)
    n, h = 300, 2056
    x, mix, og = _streams(n, m, h), _mix(n, m), torch.randn(n, h, device="cuda").bfloat16()
    o = _poison((n, h), torch.bfloat16)
    M.mhc_pre_apply_mix_fwd(x, mix, o)
    assert_bitwise(o, mhc_pre_apply_mix_fwd_ref(x, mix), "mhc_pre_apply_mix_fwd")
    xg, want_xg = torch.zeros_like(x), torch.zeros_like(x)
    want_mg = mhc_pre_apply_mix_bwd_ref(og, x, mix, want_xg)
    assert_bitwise(M.mhc_pre_apply_mix_bwd(og, x, mix, xg), want_mg, "mix_grad")
    assert_bitwise(xg, want_xg, "x_grad")


def test_pre_apply_mix_special_values(seed):
    m, n, h = 4, 64, 1032  # h not a multiple of the CTA's 1024-column span
    x, mix, og = _streams(n, m, h), _mix(n, m), torch.randn(n, h, device="cuda").bfloat16()
    for i, v in enumerate(SPECIAL):
        x[i, i % m, 3 * i] = v
        og[i + 8, 5 * i] = v
    mix[20, 1] = float("inf")
    o = _poison((n, h), torch.bfloat16)
    M.mhc_pre_apply_mix_fwd(x, mix, o)
    _nan_aware(o, mhc_pre_apply_mix_fwd_ref(x, mix), "mhc_pre_apply_mix_fwd")
    xg = torch.randn_like(x.float()).bfloat16()
    want_xg = xg.clone()
    want_mg = mhc_pre_apply_mix_bwd_ref(og, x, mix, want_xg)
    _nan_aware(M.mhc_pre_apply_mix_bwd(og, x, mix, xg), want_mg, "mix_grad")
    _nan_aware(xg, want_xg, "x_grad")


def test_pre_apply_mix_empty():
    x = torch.empty(0, 4, 1280, device="cuda", dtype=torch.bfloat16)
    mix = torch.empty(0, 4, device="cuda")
    M.mhc_pre_apply_mix_fwd(x, mix, torch.empty(0, 1280, device="cuda", dtype=torch.bfloat16))
    mg = M.mhc_pre_apply_mix_bwd(torch.empty(0, 1280, device="cuda", dtype=torch.bfloat16), x, mix, x.clone())
    assert mg.shape == (0, 4) and mg.dtype == torch.float32


# ---------------------------------------------------------------------------------------------------- post
@pytest.mark.parametrize("h", [1280, 2560, 7168])
@pytest.mark.parametrize("n0", [1, 2])
def test_post_fwd_bitwise(seed, n0, h):
    x, res, post, comb = _post_inputs(n0, 4096, 4, h)
    out = M.mhc_post_fwd(x, res, post, comb)
    assert_bitwise(out, mhc_post_fwd_ref(x, res, post, comb), "mhc_post_fwd")
    given = _poison(res.shape, torch.bfloat16)
    assert M.mhc_post_fwd(x, res, post, comb, out=given) is given
    assert_bitwise(given, out, "mhc_post_fwd(out=)")
    assert calc_diff(out, mhc_post_ref(x, res, post, comb)) < 1e-5


@pytest.mark.parametrize("h", [1280, 2560, 7168])
@pytest.mark.parametrize("n0", [1, 2])
def test_post_bwd_bitwise(seed, n0, h):
    x, res, post, comb = _post_inputs(n0, 4096, 4, h)
    d_o = torch.randn(res.shape, device="cuda").bfloat16()
    got = M.mhc_post_bwd(x, res, post, comb, d_o)
    want = mhc_post_bwd_ref(x, res, post, comb, d_o)
    for name, a, b in zip(("d_x", "d_residual", "d_post_layer_mix", "d_comb_res_mix"), got, want):
        assert_bitwise(a, b, name)
    xf, rf = x.float().requires_grad_(), res.float().requires_grad_()
    pf, cf = post.clone().requires_grad_(), comb.clone().requires_grad_()
    mhc_post_ref(xf, rf, pf, cf).backward(d_o.float())
    assert calc_diff(got[2], pf.grad) < 1e-4 and calc_diff(got[3], cf.grad) < 1e-4  # the peer's test tolerance


@pytest.mark.parametrize("m", [2, 8])
def test_post_other_stream_counts(seed, m):
    _need(C.MHC_POST_FWD, m)
    _need(C.MHC_POST_BWD, m)
    x, res, post, comb = _post_inputs(1, 300, m, 2056)
    assert_bitwise(M.mhc_post_fwd(x, res, post, comb), mhc_post_fwd_ref(x, res, post, comb), "mhc_post_fwd")
    d_o = torch.randn(res.shape, device="cuda").bfloat16()
    for a, b in zip(M.mhc_post_bwd(x, res, post, comb, d_o), mhc_post_bwd_ref(x, res, post, comb, d_o)):
        assert_bitwise(a, b, "mhc_post_bwd")


def test_post_special_values_and_strided_residual(seed):
    x, res, post, comb = _post_inputs(1, 64, 4, 1032)
    for i, v in enumerate(SPECIAL):
        x[0, i, 7 * i] = v
        res[0, i + 8, i % 4, 3 * i] = v
    comb[0, 30, 1, 2] = float("nan")
    strided = res.transpose(2, 3).contiguous().transpose(2, 3)  # the peer copies a strided residual
    out = M.mhc_post_fwd(x, strided, post, comb)
    _nan_aware(out, mhc_post_fwd_ref(x, res, post, comb), "mhc_post_fwd")
    d_o = torch.randn(res.shape, device="cuda").bfloat16()
    d_o[0, 40, 2, 9] = float("inf")
    for name, a, b in zip("xrpc", M.mhc_post_bwd(x, res, post, comb, d_o), mhc_post_bwd_ref(x, res, post, comb, d_o)):
        _nan_aware(a, b, f"mhc_post_bwd d_{name}")


def test_post_empty():
    x, res, post, comb = _post_inputs(1, 1, 4, 1280)
    e = [t[:, :0] for t in (x, res, post, comb)]
    assert M.mhc_post_fwd(*e).shape == (1, 0, 4, 1280)
    grads = M.mhc_post_bwd(*e, e[1].clone())
    assert [g.shape for g in grads] == [t.shape for t in e]


# ---------------------------------------------------------------------------------------------------- multilayer
def _chain(r0, pre, out, post, comb, layers):
    """Our own pre_apply_mix_fwd + post_fwd kernels, layer by layer."""
    n, m, h = r0.shape
    r, inputs, residuals = r0, [], []
    for layer in range(layers):
        li = _poison((n, h), torch.bfloat16)
        M.mhc_pre_apply_mix_fwd(r, pre[layer].view(n, m), li)
        inputs.append(li)
        if layer < len(out):
            r = M.mhc_post_fwd(out[layer].view(1, n, h), r.view(1, n, m, h), post[layer].view(1, n, m, 1),
                               comb[layer].view(1, n, m, m)).view(n, m, h)
            residuals.append(r)
    return inputs, residuals


@pytest.mark.parametrize("layers, posts, h", MULTILAYER)
def test_multilayer_recompute_is_the_chain(seed, layers, posts, h):
    n, m = 8192, 4
    r0, pre, out, post, comb = _chain_inputs(n, m, h, layers, posts)
    li = [_poison((n, h), torch.bfloat16) for _ in range(layers)]
    rl = [_poison((n, m, h), torch.bfloat16) for _ in range(posts)]
    assert M.mhc_multilayer_recompute(r0.view(1, n, m, h), pre, out, post, comb, li, rl) is None
    want_li, want_rl = _chain(r0, pre, out, post, comb, layers)
    for i in range(layers):
        assert_bitwise(li[i], want_li[i], f"layer_input[{i}]")
    for i in range(posts):
        assert_bitwise(rl[i], want_rl[i], f"residual[{i}]")


def test_multilayer_recompute_special_values_and_reference(seed):
    n, m, h, layers, posts = 100, 4, 1032, 4, 3
    r0, pre, out, post, comb = _chain_inputs(n, m, h, layers, posts)
    for i, v in enumerate(SPECIAL):
        r0[i, i % m, 3 * i] = v
        out[1][i + 10, 5 * i] = v
    li = [_poison((n, h), torch.bfloat16) for _ in range(layers)]
    rl = [_poison((n, m, h), torch.bfloat16) for _ in range(posts)]
    M.mhc_multilayer_recompute(r0, pre, out, post, comb, li, rl)
    want_li, want_rl = _chain(r0, pre, out, post, comb, layers)
    for a, b in zip(li + rl, want_li + want_rl):
        _nan_aware(a, b, "multilayer vs chain")
    from kernelkiln.torch import mhc_multilayer_recompute_ref
    ref_li = [torch.empty_like(t) for t in li]
    ref_rl = [torch.empty_like(t) for t in rl]
    mhc_multilayer_recompute_ref(r0, pre, out, post, comb, ref_li, ref_rl)
    for a, b in zip(li + rl, ref_li + ref_rl):
        _nan_aware(a, b, "multilayer vs reference")


def test_multilayer_recompute_empty_and_repeated_calls(seed):
    r0, pre, out, post, comb = _chain_inputs(0, 4, 2560, 2, 1)
    M.mhc_multilayer_recompute(r0, pre, out, post, comb, [torch.empty(0, 2560, device="cuda").bfloat16()] * 2,
                               [torch.empty(0, 4, 2560, device="cuda").bfloat16()])
    # back-to-back calls with different tables: each launch reads its own (the host buffers are not reused early)
    n, h = 512, 2560
    results = []
    for _ in range(3):
        r0, pre, out, post, comb = _chain_inputs(n, 4, h, 3, 3)
        li = [_poison((n, h), torch.bfloat16) for _ in range(3)]
        rl = [_poison((n, 4, h), torch.bfloat16) for _ in range(3)]
        M.mhc_multilayer_recompute(r0, pre, out, post, comb, li, rl)
        results.append((li, rl, _chain(r0, pre, out, post, comb, 3)))
    for li, rl, (want_li, want_rl) in results:
        for a, b in zip(li + rl, want_li + want_rl):
            assert_bitwise(a, b, "multilayer (repeated calls)")
