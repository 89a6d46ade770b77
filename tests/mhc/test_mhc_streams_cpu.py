"""The mHC stream ops on the CPU: our references against the peer's (tile_kernels 2.1.0's torch/mhc.py, loaded by
path from its wheel) — bitwise where both orders give the same bits (copies, exact small-integer data, one-hot
mixes), within the peer's tolerances otherwise (forward and, through autograd of the peer's references, backward) —
the kernels' reduction order written out a second way, and every argument error of the public functions."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkiln
from kernelkiln.torch import (expand_to_mhc_bwd_ref, expand_to_mhc_ref, mhc_multilayer_recompute_ref,
                              mhc_post_bwd_ref, mhc_post_fwd_ref, mhc_post_ref, mhc_pre_apply_mix_bwd_ref,
                              mhc_pre_apply_mix_fwd_ref, mhc_pre_apply_mix_ref, stream_dot_ref)
from kernelkiln.torch.fused import fma_f32

M = kernelkiln.mhc
SPECIAL = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3.0e38, 1e-30]


@pytest.fixture(scope="session")
def peer_mhc(peer_reference):
    return peer_reference("torch/mhc.py")


def calc_diff(x, y):
    """The peer's test metric: Σ(x−y)² / Σ(x²+y²) in float64 (0 for two zero tensors)."""
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else ((x - y) ** 2).sum().item() / den.item()


def _same_nan_and_bits(a, b):
    """Bitwise, NaN matching NaN (the peer's torch conversions keep payloads, ours are canonical)."""
    assert torch.equal(a.isnan(), b.isnan())
    keep = ~a.isnan()
    bits = torch.int16 if a.dtype == torch.bfloat16 else torch.int32
    assert torch.equal(a[keep].view(bits), b[keep].view(bits))


def _ints(g, shape, lo=-8, hi=9):
    return torch.randint(lo, hi, shape, generator=g).float()


def _poke(t, g, specials):
    flat = t.view(-1)
    for v in specials:
        flat[torch.randint(0, flat.numel(), (1,), generator=g)] = v
    return t


# ------------------------------------------------------------------------------------------------ expand
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 9), h=st.sampled_from([8, 64, 136]), m=st.sampled_from([2, 4, 8]), seed=st.integers(0, 2**16))
def test_expand_reference_is_the_peers(peer_mhc, n, h, m, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, h, generator=g).bfloat16()
    if n:
        _poke(x, g, SPECIAL)
    got, want = expand_to_mhc_ref(x, m), peer_mhc.expand_to_mhc_ref(x, m)
    assert got.shape == want.shape == (n, m, h) and got.is_contiguous()
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))  # a copy: NaN payloads too


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 9), h=st.sampled_from([8, 64]), m=st.sampled_from([2, 4, 8]), exact=st.booleans(),
       seed=st.integers(0, 2**16))
def test_expand_bwd_reference_against_the_peers_autograd(peer_mhc, n, h, m, exact, seed):
    g = torch.Generator().manual_seed(seed)
    og = (_ints(g, (n, m, h)) if exact else torch.randn(n, m, h, generator=g)).bfloat16()
    x = torch.zeros(n, h, dtype=torch.float32, requires_grad=True)
    peer_mhc.expand_to_mhc_ref(x, m).backward(og.float())
    got = expand_to_mhc_bwd_ref(og)
    assert got.dtype == torch.bfloat16 and got.shape == (n, h)
    if exact:
        assert torch.equal(got.float(), x.grad)
    else:
        assert calc_diff(got, x.grad) < 1e-5
    # the order is stream order from +0: four terms where another order loses the 1
    big = torch.tensor([[[2.0**20], [1.0], [-(2.0**20)], [0.0]]]).bfloat16()
    assert expand_to_mhc_bwd_ref(big).item() == 1.0
    assert expand_to_mhc_bwd_ref(torch.full((1, 2, 8), -0.0).bfloat16()).view(torch.int16).eq(0).all()  # +0


# ------------------------------------------------------------------------------------------------ pre apply mix
def _mix(g, n, m):
    return torch.softmax(torch.randn(n, m, generator=g), -1)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), h=st.sampled_from([8, 256]), m=st.sampled_from([2, 4, 8]), seed=st.integers(0, 2**16))
def test_apply_mix_references_against_the_peers(peer_mhc, n, h, m, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.sigmoid(torch.randn(n, m, h, generator=g)).bfloat16()
    mix = _mix(g, n, m)
    want = peer_mhc.mhc_pre_apply_mix_ref(x, mix.unsqueeze(-1))
    assert torch.equal(mhc_pre_apply_mix_ref(x, mix.unsqueeze(-1)).view(torch.int16), want.view(torch.int16))
    got = mhc_pre_apply_mix_fwd_ref(x, mix)
    assert got.shape == (n, h) and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), want.float(), atol=1e-2, rtol=1e-3)  # the peer's test tolerance
    assert torch.equal(got, mhc_pre_apply_mix_fwd_ref(x, mix.unsqueeze(-1)))  # [n, m, 1] is the same mix
    # exact small integers: every order gives the same bits
    xi, wi = _ints(g, (n, m, h)).bfloat16(), _ints(g, (n, m))
    assert torch.equal(mhc_pre_apply_mix_fwd_ref(xi, wi), peer_mhc.mhc_pre_apply_mix_ref(xi, wi.unsqueeze(-1)))


def test_apply_mix_order_is_product_then_fma():
    """m_0·x_0 is rounded, then fma(m_1, x_1, .): with m_0 = 1 + 2^-23 the product loses 2^-30, which an exactly
    fused sum would keep (2^-23·(1 + 2^-7) instead of 2^-23, apart in bf16)."""
    x = torch.tensor([[[1.0 + 2.0**-7], [1.0 + 2.0**-7]]]).bfloat16()  # exact in bf16
    w = torch.tensor([[1.0 + 2.0**-7, -(1.0 + 2.0**-7)]])
    # the first product (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 is exact in fp32, so fma gives 0 exactly
    assert mhc_pre_apply_mix_fwd_ref(x, w).float().item() == 0.0
    w2 = torch.tensor([[1.0 + 2.0**-23, -1.0]])
    x2 = torch.tensor([[[1.0 + 2.0**-7], [1.0 + 2.0**-7]]]).bfloat16()
    p0 = torch.tensor(1.0 + 2.0**-23) * torch.tensor(1.0 + 2.0**-7)  # rounded in fp32
    want = fma_f32(torch.tensor(-1.0), torch.tensor(1.0 + 2.0**-7), p0)
    assert mhc_pre_apply_mix_fwd_ref(x2, w2).float().item() == want.bfloat16().float().item()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 4), h=st.sampled_from([8, 1032, 2560]), m=st.sampled_from([2, 4]), seed=st.integers(0, 2**16))
def test_apply_mix_bwd_reference_against_the_peers_autograd(peer_mhc, n, h, m, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.sigmoid(torch.randn(n, m, h, generator=g)).bfloat16()
    mix = _mix(g, n, m)
    og = torch.randn(n, h, generator=g).bfloat16()
    xg0 = torch.randn(n, m, h, generator=g).bfloat16()
    xg = xg0.clone()
    mix_grad = mhc_pre_apply_mix_bwd_ref(og, x, mix, xg)
    xf = x.float().requires_grad_()
    wf = mix.unsqueeze(-1).clone().requires_grad_()
    peer_mhc.mhc_pre_apply_mix_ref(xf, wf).backward(og.float())
    assert mix_grad.shape == (n, m) and mix_grad.dtype == torch.float32
    assert calc_diff(mix_grad, wf.grad.squeeze(-1)) < 1e-6
    assert torch.allclose(xg.float(), xg0.float() + xf.grad, atol=1e-2, rtol=1e-2)
    assert torch.equal(xg, fma_f32(mix.unsqueeze(-1), og.float().unsqueeze(1), xg0.float()).bfloat16())


def _stream_dot_loops(a, b, threads):
    """stream_dot_ref's order written as the kernel's loops, one thread at a time (scalar fma), then the xor
    butterfly as the lanes run it (thread t adds thread t ^ d's value, d = threads/2 .. 1)."""
    h = a.shape[0]
    groups = h // 8
    partial = []
    for t in range(threads):
        acc = torch.tensor(0.0)
        for c in range(t, groups, threads):
            for j in range(8):
                acc = fma_f32(a[c * 8 + j], b[c * 8 + j], acc)
        partial.append(acc)
    d = threads // 2
    while d >= 1:
        partial = [partial[t] + partial[t ^ d] for t in range(threads)]
        d //= 2
    assert all(p.view(torch.int32).item() == partial[0].view(torch.int32).item() for p in partial)
    return partial[0]


@pytest.mark.parametrize("threads", [128, 64])
@pytest.mark.parametrize("h", [8, 1032, 2048 + 24])
def test_stream_dot_order_written_as_loops(h, threads):
    g = torch.Generator().manual_seed(h)
    a, b = torch.randn(h, generator=g).bfloat16().float(), torch.randn(h, generator=g).bfloat16().float()
    a[::97] *= 1e4
    got = stream_dot_ref(a, b, threads)
    assert got.view(torch.int32).item() == _stream_dot_loops(a, b, threads).view(torch.int32).item()


def test_stream_dot_order_is_per_thread_then_butterfly():
    """Column 0 and 1024 are thread 0's (they cancel there), column 8 is thread 1's: the sum is 1; adding the
    columns in index order in fp32 would lose the 1 (1e8 + 1 = 1e8)."""
    a = torch.zeros(2048)
    a[0], a[8], a[1024] = 1e8, 1.0, -1e8
    assert stream_dot_ref(a, torch.ones(2048)).item() == 1.0
    serial = torch.tensor(0.0)
    for v in a:
        serial = serial + v
    assert serial.item() == 0.0


def test_stream_dot_butterfly_starts_at_the_largest_offset():
    """Threads 0 and 64 (columns 0 and 512) meet first and cancel, so thread 32's 1 survives; butterflies inside
    each warp first and the warp totals in warp order ((1e8 + 1) + -1e8) would give 0. With 64 threads, column 512
    is thread 0's second group and cancels there; column 256 is thread 32's."""
    a = torch.zeros(1024)
    a[0], a[256], a[512] = 1e8, 1.0, -1e8
    ones = torch.ones(1024)
    assert stream_dot_ref(a, ones).item() == 1.0
    assert stream_dot_ref(a, ones, 64).item() == 1.0
    warps = [a[w * 256:(w + 1) * 256].sum() for w in range(4)]  # each warp's total is exact here
    assert (((warps[0] + warps[1]) + warps[2]) + warps[3]).item() == 0.0
    with pytest.raises(ValueError, match="threads"):
        stream_dot_ref(a, ones, 96)


# ------------------------------------------------------------------------------------------------ post
def _post_inputs(g, a, b, m, h, exact=False):
    if exact:
        return (_ints(g, (a, b, h)).bfloat16(), _ints(g, (a, b, m, h)).bfloat16(), _ints(g, (a, b, m, 1)),
                _ints(g, (a, b, m, m)))
    x = torch.randn(a, b, h, generator=g).bfloat16()
    res = (torch.randn(a, b, m, h, generator=g) * (1 + 0.01 * torch.arange(m)).view(m, 1)).bfloat16()
    post = torch.sigmoid(torch.randn(a, b, m, 1, generator=g)) * 2
    comb = torch.softmax(torch.randn(a, b, m, m, generator=g), -1)
    return x, res, post, comb


@settings(max_examples=40, deadline=None)
@given(a=st.integers(1, 2), b=st.integers(1, 5), h=st.sampled_from([8, 128, 264]), m=st.sampled_from([2, 4, 8]),
       seed=st.integers(0, 2**16))
def test_post_references_against_the_peers(peer_mhc, a, b, h, m, seed):
    g = torch.Generator().manual_seed(seed)
    x, res, post, comb = _post_inputs(g, a, b, m, h)
    want = peer_mhc.mhc_post_ref(x, res, post, comb)
    assert torch.equal(mhc_post_ref(x, res, post, comb).view(torch.int16), want.view(torch.int16))
    got = mhc_post_fwd_ref(x, res, post, comb)
    assert got.shape == want.shape == (a, b, m, h) and got.dtype == torch.bfloat16
    assert calc_diff(got, want) < 1e-5
    assert torch.allclose(got.float(), want.float(), atol=2e-2, rtol=1e-2)
    xi, ri, pi, ci = _post_inputs(g, a, b, m, h, exact=True)
    assert torch.equal(mhc_post_fwd_ref(xi, ri, pi, ci), peer_mhc.mhc_post_ref(xi, ri, pi, ci))


def test_post_order_is_stream_zero_product_then_fused_post():
    """acc = comb[0, o]·r_0 rounded, then fma(c_o, x, acc), then fma(comb[i, o], r_i, acc) for i >= 1 (the peer's
    kernel as nvcc contracts it, scripts/diag_mhc_post.py): c·x cancels the stream-0 product exactly only if that
    product is the one rounded first."""
    v = 1.0 + 2.0**-7
    c = 1.0 + 2.0**-23
    x = torch.tensor([[[v] * 8]]).bfloat16()
    res = torch.tensor([[[[v] * 8, [1.0] * 8]]]).bfloat16()
    post = torch.tensor([[[[-c], [0.0]]]])
    comb = torch.tensor([[[[c, 0.0], [0.0, 1.0]]]])
    p0 = torch.tensor(c) * torch.tensor(v)  # fp32-rounded stream-0 product
    want = fma_f32(torch.tensor(-c), torch.tensor(v), p0)  # the residual of that rounding
    got = mhc_post_fwd_ref(x, res, post, comb)
    assert got[0, 0, 0, 0].item() == want.bfloat16().item() != 0.0


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 3), h=st.sampled_from([8, 1280, 1032]), m=st.sampled_from([2, 4]), seed=st.integers(0, 2**16))
def test_post_bwd_reference_against_the_peers_autograd(peer_mhc, b, h, m, seed):
    g = torch.Generator().manual_seed(seed)
    x, res, post, comb = _post_inputs(g, 1, b, m, h)
    d_o = torch.randn(1, b, m, h, generator=g).bfloat16()
    d_x, d_res, d_post, d_comb = mhc_post_bwd_ref(x, res, post, comb, d_o)
    xf, rf = x.float().requires_grad_(), res.float().requires_grad_()
    pf, cf = post.clone().requires_grad_(), comb.clone().requires_grad_()
    peer_mhc.mhc_post_ref(xf, rf, pf, cf).backward(d_o.float())
    assert (d_x.dtype, d_res.dtype, d_post.dtype, d_comb.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32,
                                                                    torch.float32)
    assert d_x.shape == x.shape and d_res.shape == res.shape and d_post.shape == post.shape
    assert d_comb.shape == comb.shape
    assert calc_diff(d_x, xf.grad) < 1e-5 and calc_diff(d_res, rf.grad) < 1e-5
    assert calc_diff(d_post, pf.grad) < 1e-4 and calc_diff(d_comb, cf.grad) < 1e-4  # the peer's test tolerance
    # d_x, d_residual: fma chains over o from +0
    gf = d_o.float()
    want = torch.zeros_like(gf[..., 0, :])
    for o in range(m):
        want = fma_f32(post[..., o, :], gf[..., o, :], want)
    assert torch.equal(d_x, want.bfloat16())
    assert torch.equal(d_comb[0, 0, 1, 0], stream_dot_ref(res[0, 0, 1].float(), gf[0, 0, 0], 64))
    assert torch.equal(d_post[0, 0, 1, 0], stream_dot_ref(x[0, 0].float(), gf[0, 0, 1], 64))


# ------------------------------------------------------------------------------------------------ multilayer
def _chain_inputs(g, n, m, h, layers, posts):
    r0 = torch.randn(n, m, h, generator=g).bfloat16()
    pre = [torch.sigmoid(torch.randn(n, m, 1, generator=g)) for _ in range(layers)]
    out = [torch.randn(n, h, generator=g).bfloat16() for _ in range(posts)]
    post = [torch.sigmoid(torch.randn(n, m, generator=g)) * 2 for _ in range(posts)]
    comb = [torch.softmax(torch.randn(n, m, m, generator=g), -1) for _ in range(posts)]
    return r0, pre, out, post, comb


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), h=st.sampled_from([8, 64]), m=st.sampled_from([2, 4]), layers=st.integers(1, 4),
       last=st.booleans(), seed=st.integers(0, 2**16))
def test_multilayer_reference_is_the_chain(peer_mhc, n, h, m, layers, last, seed):
    g = torch.Generator().manual_seed(seed)
    posts = layers - 1 if last else layers
    r0, pre, out, post, comb = _chain_inputs(g, n, m, h, layers, posts)
    li = [torch.full((n, h), float("nan")).bfloat16() for _ in range(layers)]
    rl = [torch.full((n, m, h), float("nan")).bfloat16() for _ in range(posts)]
    assert mhc_multilayer_recompute_ref(r0, pre, out, post, comb, li, rl) is None
    r, pr = r0, r0
    for layer in range(layers):
        assert torch.equal(li[layer], mhc_pre_apply_mix_fwd_ref(r, pre[layer]))
        assert calc_diff(li[layer], peer_mhc.mhc_pre_apply_mix_ref(pr, pre[layer])) < 1e-4
        if layer < posts:
            r = mhc_post_fwd_ref(out[layer], r, post[layer], comb[layer])
            pr = peer_mhc.mhc_post_ref(out[layer][None], pr[None], post[layer][None, ..., None], comb[layer][None])[0]
            assert torch.equal(rl[layer], r)
            assert calc_diff(rl[layer], pr) < 1e-4


# ------------------------------------------------------------------------------------------------ special values
@pytest.mark.parametrize("special", SPECIAL)
def test_references_with_special_values_match_the_peers_nan_and_inf(peer_mhc, special):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, 16, generator=g).bfloat16()
    x[1, 2, 5] = special
    mix = _mix(g, 3, 4)
    ours, peer = mhc_pre_apply_mix_fwd_ref(x, mix), peer_mhc.mhc_pre_apply_mix_ref(x, mix.unsqueeze(-1))
    assert torch.equal(ours.isnan(), peer.isnan()) and torch.equal(ours.isinf(), peer.isinf())
    if ours.isnan().any():
        assert (ours[ours.isnan()].view(torch.int16) == 0x7FFF).all()  # the GPU's canonical NaN
    xp, res, post, comb = _post_inputs(g, 1, 3, 4, 16)
    res[0, 1, 2, 5] = special
    ours, peer = mhc_post_fwd_ref(xp, res, post, comb), peer_mhc.mhc_post_ref(xp, res, post, comb)
    assert torch.equal(ours.isnan(), peer.isnan()) and torch.equal(ours.isinf(), peer.isinf())


# ------------------------------------------------------------------------------------------------ argument errors
def _bf(*shape):
    return torch.zeros(shape, dtype=torch.bfloat16)


def _f(*shape):
    return torch.zeros(shape, dtype=torch.float32)


@pytest.mark.parametrize("args, exc, match", [
    ((_f(4, 64), _bf(4, 4, 64)), TypeError, "x has dtype"),
    ((_bf(4, 64), _f(4, 4, 64)), TypeError, "o has dtype"),
    ((_bf(4, 4, 64), _bf(4, 4, 64)), ValueError, "x must be 2-D"),
    ((_bf(4, 64), _bf(4, 3, 64)), ValueError, r"mhc_mult\) must be one of \[2, 4, 8\]"),
    ((_bf(4, 64), _bf(5, 4, 64)), ValueError, "o must have shape"),
    ((_bf(4, 60), _bf(4, 4, 60)), ValueError, "multiple of 8"),
    ((_bf(64, 4).t(), _bf(4, 4, 64)), ValueError, "x must be contiguous"),
    (("x", _bf(4, 4, 64)), TypeError, "x must be a torch.Tensor"),
    ((_bf(4, 64), _bf(4, 4, 64)), ValueError, "need a CUDA tensor"),
])
def test_expand_fwd_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        M.expand_to_mhc_fwd(*args)


@pytest.mark.parametrize("args, exc, match", [
    ((_f(4, 4, 64), _bf(4, 64)), TypeError, "o_grad has dtype"),
    ((_bf(4, 4, 64), _f(4, 64)), TypeError, "x_grad has dtype"),
    ((_bf(4, 4, 64), _bf(4, 32)), ValueError, "x_grad must have shape"),
    ((_bf(4, 5, 64), _bf(4, 64)), ValueError, "mhc_mult"),
    ((_bf(4, 4, 12), _bf(4, 12)), ValueError, "multiple of 8"),
    ((_bf(4, 64, 4).transpose(1, 2), _bf(4, 64)), ValueError, "o_grad must be contiguous"),
    ((_bf(4, 4, 64), _bf(4, 64)), ValueError, "need a CUDA tensor"),
])
def test_expand_bwd_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        M.expand_to_mhc_bwd(*args)


@pytest.mark.parametrize("args, exc, match", [
    ((_f(4, 4, 64), _f(4, 4), _bf(4, 64)), TypeError, "x has dtype"),
    ((_bf(4, 4, 64), _bf(4, 4), _bf(4, 64)), TypeError, "mix has dtype"),
    ((_bf(4, 4, 64), _f(4, 4), _f(4, 64)), TypeError, "o has dtype"),
    ((_bf(4, 4, 64), _f(4, 4, 1), _bf(4, 64)), ValueError, "mix must be 2-D"),
    ((_bf(4, 4, 64), _f(4, 3), _bf(4, 64)), ValueError, "mix must have shape"),
    ((_bf(4, 4, 64), _f(4, 4), _bf(4, 32)), ValueError, "o must have shape"),
    ((_bf(4, 6, 64), _f(4, 6), _bf(4, 64)), ValueError, "mhc_mult"),
    ((_bf(4, 4, 20), _f(4, 4), _bf(4, 20)), ValueError, "multiple of 8"),
    ((_bf(4, 4, 64), _f(4, 4), _bf(64, 4).t()), ValueError, "o must be contiguous"),
    ((_bf(4, 4, 64), _f(4, 4), _bf(4, 64)), ValueError, "need a CUDA tensor"),
])
def test_apply_mix_fwd_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        M.mhc_pre_apply_mix_fwd(*args)


@pytest.mark.parametrize("args, exc, match", [
    ((_f(4, 64), _bf(4, 4, 64), _f(4, 4), _bf(4, 4, 64)), TypeError, "o_grad has dtype"),
    ((_bf(4, 32), _bf(4, 4, 64), _f(4, 4), _bf(4, 4, 64)), ValueError, "o_grad must have shape"),
    ((_bf(4, 64), _bf(4, 4, 64), _f(4, 4), _f(4, 4, 64)), TypeError, "x_grad has dtype"),
    ((_bf(4, 64), _bf(4, 4, 64), _f(4, 4), _bf(4, 2, 64)), ValueError, "x_grad must have x's shape"),
    ((_bf(4, 64), _bf(4, 4, 64), _f(4, 2), _bf(4, 4, 64)), ValueError, "mix must have shape"),
    ((_bf(4, 64), _bf(4, 4, 64), _f(4, 4), _bf(4, 64, 4).transpose(1, 2)), ValueError, "x_grad must be contiguous"),
    ((_bf(4, 64), _bf(4, 4, 64), _f(4, 4), _bf(4, 4, 64)), ValueError, "need a CUDA tensor"),
])
def test_apply_mix_bwd_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        M.mhc_pre_apply_mix_bwd(*args)


def _post_args(m=4, h=64):
    return [_bf(1, 3, h), _bf(1, 3, m, h), _f(1, 3, m, 1), _f(1, 3, m, m)]


@pytest.mark.parametrize("which, bad, exc, match", [
    (0, _f(1, 3, 64), TypeError, "x has dtype"),
    (1, _f(1, 3, 4, 64), TypeError, "residual has dtype"),
    (2, _bf(1, 3, 4, 1), TypeError, "post_layer_mix has dtype"),
    (3, _bf(1, 3, 4, 4), TypeError, "comb_res_mix has dtype"),
    (0, _bf(3, 64), ValueError, "x must be 3-D"),
    (0, _bf(1, 3, 32), ValueError, "x must have shape"),
    (2, _f(1, 3, 4), ValueError, "post_layer_mix must be 4-D"),
    (2, _f(1, 3, 4, 2), ValueError, "post_layer_mix must have shape"),
    (3, _f(1, 3, 4, 2), ValueError, "comb_res_mix must have shape"),
    (1, _bf(1, 3, 3, 64), ValueError, "mhc_mult"),
    (3, _f(1, 3, 4, 4).transpose(2, 3), ValueError, "comb_res_mix must be contiguous"),
])
def test_post_errors(which, bad, exc, match):
    args = _post_args()
    args[which] = bad
    with pytest.raises(exc, match=match):
        M.mhc_post_fwd(*args)
    d_o = _bf(1, 3, 4, 64) if which != 1 or bad.dim() != 4 else torch.zeros_like(bad, dtype=torch.bfloat16)
    with pytest.raises(exc, match=match):
        M.mhc_post_bwd(*args, d_o)


def test_post_errors_of_out_d_o_hidden_and_device():
    with pytest.raises(ValueError, match="multiple of 8"):
        M.mhc_post_fwd(*_post_args(h=12))
    with pytest.raises(TypeError, match="out has dtype"):
        M.mhc_post_fwd(*_post_args(), out=_f(1, 3, 4, 64))
    with pytest.raises(ValueError, match="out must have residual's shape"):
        M.mhc_post_fwd(*_post_args(), out=_bf(1, 3, 4, 32))
    with pytest.raises(ValueError, match="out must be contiguous"):
        M.mhc_post_fwd(*_post_args(), out=_bf(1, 3, 64, 4).transpose(2, 3))
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        M.mhc_post_fwd(*_post_args())
    with pytest.raises(ValueError, match="need a CUDA tensor"):  # a strided residual is copied, as the peer does
        M.mhc_post_fwd(_bf(1, 3, 64), _bf(1, 3, 64, 4).transpose(2, 3), _f(1, 3, 4, 1), _f(1, 3, 4, 4))
    with pytest.raises(TypeError, match="d_o has dtype"):
        M.mhc_post_bwd(*_post_args(), _f(1, 3, 4, 64))
    with pytest.raises(ValueError, match="d_o must have residual's shape"):
        M.mhc_post_bwd(*_post_args(), _bf(1, 3, 4, 32))
    with pytest.raises(ValueError, match="residual must be contiguous"):
        M.mhc_post_bwd(_bf(1, 3, 64), _bf(1, 3, 64, 4).transpose(2, 3), _f(1, 3, 4, 1), _f(1, 3, 4, 4),
                       _bf(1, 3, 4, 64))
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        M.mhc_post_bwd(*_post_args(), _bf(1, 3, 4, 64))


def _ml_args(n=3, m=4, h=64, layers=3, posts=2):
    return dict(initial_residual=_bf(n, m, h), pre_mix_list=[_f(n, m, 1) for _ in range(layers)],
                layer_output_list=[_bf(n, h) for _ in range(posts)], post_mix_list=[_f(n, m) for _ in range(posts)],
                comb_mix_list=[_f(n, m, m) for _ in range(posts)], layer_input_list=[_bf(n, h) for _ in range(layers)],
                residual_list=[_bf(n, m, h) for _ in range(posts)])


@pytest.mark.parametrize("change, exc, match", [
    (dict(initial_residual=_f(3, 4, 64)), TypeError, "initial_residual has dtype"),
    (dict(initial_residual=_bf(64)), ValueError, "initial_residual must be"),
    (dict(initial_residual=_bf(3, 5, 64)), ValueError, "mhc_mult"),
    (dict(initial_residual=_bf(3, 4, 60)), ValueError, "multiple of 8"),
    (dict(initial_residual=_bf(3, 64, 4).transpose(1, 2)), ValueError, "initial_residual must be contiguous"),
    (dict(pre_mix_list=[]), ValueError, "at least one layer"),
    (dict(pre_mix_list=_f(3, 4)), TypeError, "pre_mix_list must be a list"),
    (dict(layer_output_list=[_bf(3, 64)]), ValueError, "L_post"),
    (dict(post_mix_list=[_f(3, 4)]), ValueError, "post_mix_list must hold 2 tensors"),
    (dict(comb_mix_list=[_f(3, 4, 4), _f(3, 4, 2)]), ValueError, r"comb_mix_list\[1\] must hold"),
    (dict(residual_list=[_bf(3, 4, 64), _f(3, 4, 64)]), TypeError, r"residual_list\[1\] has dtype"),
    (dict(layer_input_list=[_bf(3, 64), _bf(3, 64)]), ValueError, "layer_input_list must hold 3 tensors"),
    (dict(layer_input_list=[_bf(3, 64), _bf(64, 3).t(), _bf(3, 64)]), ValueError,
     r"layer_input_list\[1\] must be contiguous"),
    (dict(pre_mix_list=[_f(3, 4), _f(3, 4), _bf(3, 4)]), TypeError, r"pre_mix_list\[2\] has dtype"),
    (dict(), ValueError, "need a CUDA tensor"),
])
def test_multilayer_errors(change, exc, match):
    args = {**_ml_args(), **change}
    with pytest.raises(exc, match=match):
        M.mhc_multilayer_recompute(**args)


def test_multilayer_takes_l_post_equal_to_l_before_the_device_check():
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        M.mhc_multilayer_recompute(**_ml_args(layers=2, posts=2))


def test_public_names_and_torch_ops():
    names = {"expand_to_mhc_fwd", "expand_to_mhc_bwd", "mhc_pre_apply_mix_fwd", "mhc_pre_apply_mix_bwd",
             "mhc_post_fwd", "mhc_post_bwd", "mhc_multilayer_recompute"}
    assert names <= set(M.__all__)
    for name in names | {"mhc_post_fwd_out"}:
        assert callable(getattr(torch.ops.kernelkiln, name))
