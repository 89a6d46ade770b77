"""mhc_sinkhorn_fwd / mhc_sinkhorn_bwd / mhc_pre_big_fuse_fwd on the CPU: the references against the peer's
(tile_kernels 2.1.0's torch/mhc.py, loaded by path), the ordered backward against autograd, the backward's
segmented recomputation (the kernel's loop, mirrored) against the one-pass reference, the fused pre-block against
the unfused chain of ordered references (bit for bit), and every argument error of the public functions."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkiln
from kernelkiln.torch import (mhc_pre_big_fuse_fwd_ref, mhc_sinkhorn_bwd_ref, mhc_sinkhorn_fwd_ref,
                              sinkhorn_normalize_ref)
from kernelkiln.torch import mhc_sinkhorn as refs
from kernelkiln.torch.fused import fma_f32
from kernelkiln_contract.mhc_sinkhorn import SINKHORN_BWD_SLOTS

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def peer_mhc(peer_reference):
    """The peer's torch/mhc.py (loaded by path: tests/conftest.py's peer_reference)."""
    return peer_reference("torch/mhc.py")


def _logits(g, shape, scale=1.0):
    return torch.randn(shape, generator=g) * scale


def _same_nan(a, b):
    assert torch.equal(torch.isnan(a), torch.isnan(b))


# ----------------------------------------------------------------------------------------------------------------
# references vs the peer's


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 20), m=st.sampled_from([2, 4, 8]), repeat=st.integers(1, 25),
       eps=st.sampled_from([1e-6, 1e-3, 0.0]), scale=st.sampled_from([0.1, 1.0, 8.0]), seed=st.integers(0, 2**16))
def test_sinkhorn_normalize_ref_is_the_peers(peer_mhc, n, m, repeat, eps, scale, seed):
    x = _logits(torch.Generator().manual_seed(seed), (n, m, m), scale)
    assert torch.equal(sinkhorn_normalize_ref(x, repeat, eps), peer_mhc.sinkhorn_normalize_ref(x, repeat, eps))


def test_sinkhorn_normalize_ref_defaults(peer_mhc):
    x = _logits(torch.Generator().manual_seed(1), (3, 4, 4))
    assert torch.equal(sinkhorn_normalize_ref(x), peer_mhc.sinkhorn_normalize_ref(x))
    assert torch.equal(sinkhorn_normalize_ref(x), sinkhorn_normalize_ref(x, 10, 1e-6))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 20), m=st.sampled_from([2, 4, 8]), repeat=st.sampled_from([1, 2, 10, 20]),
       eps=st.sampled_from([1e-6, 1e-3]), scale=st.sampled_from([0.1, 1.0, 8.0]), seed=st.integers(0, 2**16))
def test_ordered_forward_matches_peer(peer_mhc, n, m, repeat, eps, scale, seed):
    """Same formula, another summation order: agreement to fp32 rounding."""
    x = _logits(torch.Generator().manual_seed(seed), (n, m, m), scale)
    got = mhc_sinkhorn_fwd_ref(x, repeat, eps)
    want = peer_mhc.sinkhorn_normalize_ref(x.double(), repeat, eps)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=1e-7)


def test_ordered_forward_is_doubly_stochastic():
    x = _logits(torch.Generator().manual_seed(2), (64, 4, 4), 0.5)
    y = mhc_sinkhorn_fwd_ref(x, 20, 1e-6)
    torch.testing.assert_close(y.sum(-2), torch.ones(64, 4), rtol=0, atol=1e-5)
    torch.testing.assert_close(y.sum(-1), torch.ones(64, 4), rtol=0, atol=2e-3)


def test_ordered_forward_order_is_the_butterfly():
    """The sums are (v0 + v2) + (v1 + v3) (the peer's lowered tl::AllReduce): a row whose serial, pairwise and
    reversed sums round differently tells the orders apart."""
    x = torch.zeros(1, 4, 4)
    e = refs._softmax(x)
    assert torch.equal(e, torch.full((1, 4, 4), 0.25))
    v = torch.tensor([[1.0, 2.0**-24, 2.0**-24, 2.0**-24]])
    assert refs._sum(v, -1).item() == 1.0 + 2.0**-23  # (1 + 2^-24) ties to 1, plus 2^-23
    assert (((v[0, 0] + v[0, 1]) + v[0, 2]) + v[0, 3]).item() == 1.0  # serial: each 1 + 2^-24 ties back to 1
    w = torch.tensor([[1.0, 2.0**-24, 3 * 2.0**-24, -1.0]])  # butterfly, adjacent pairs, serial: three results
    assert refs._sum(w, -1).item() == 5 * 2.0**-24
    assert ((w[0, 0] + w[0, 1]) + (w[0, 2] + w[0, 3])).item() == 3 * 2.0**-24
    assert (((w[0, 0] + w[0, 1]) + w[0, 2]) + w[0, 3]).item() == 4 * 2.0**-24
    assert torch.equal(refs._sum(v.view(1, 4, 1), -2), refs._sum(v, -1).view(1, 1, 1))  # the columns alike


def _lane_butterfly(vals, offsets):
    """The kernel's sum as its lanes run it: lane e holds 0 + v[e], then adds lane e ^ d for each offset d."""
    lanes = [torch.tensor(0.0) + v for v in vals]
    for d in offsets:
        lanes = [lanes[e] + lanes[e ^ d] for e in range(len(lanes))]
    return lanes


@pytest.mark.parametrize("seed", range(4))
def test_ordered_sums_are_the_lane_butterfly(seed):
    """_sum equals the xor butterfly of tl::AllReduce<4, 1> (a row: offsets 2, 1) and <16, 4> (a column: offsets
    8, 4) on a token's 16 lanes (lane j·4 + k), at every lane."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 4, generator=g) * torch.logspace(0, 7, 4).view(4, 1)
    lanes = x.reshape(16)
    rows = _lane_butterfly(lanes, (2, 1))
    cols = _lane_butterfly(lanes, (8, 4))
    r, c = refs._sum(x.unsqueeze(0), -1)[0, :, 0], refs._sum(x.unsqueeze(0), -2)[0, 0, :]
    for e in range(16):
        assert rows[e].view(torch.int32).item() == r[e // 4].view(torch.int32).item()
        assert cols[e].view(torch.int32).item() == c[e % 4].view(torch.int32).item()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), m=st.sampled_from([2, 4]), repeat=st.sampled_from([1, 2, 5, 10, 20]),
       eps=st.sampled_from([1e-6, 1e-2]), scale=st.sampled_from([0.5, 2.0]), seed=st.integers(0, 2**16))
def test_ordered_backward_matches_autograd(peer_mhc, n, m, repeat, eps, scale, seed):
    g = torch.Generator().manual_seed(seed)
    x = _logits(g, (n, m, m), scale)
    go = torch.randn(n, m, m, generator=g)
    xd = x.double().requires_grad_()
    (want,) = torch.autograd.grad(peer_mhc.sinkhorn_normalize_ref(xd, repeat, eps), xd, go.double())
    (ours,) = torch.autograd.grad(sinkhorn_normalize_ref(xd, repeat, eps), xd, go.double())
    assert torch.equal(ours, want)
    got = mhc_sinkhorn_bwd_ref(go, x, repeat, eps)
    torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-5 * want.abs().max().item() + 1e-7)


def _segmented_bwd(go, x, repeat, eps, slots):
    """The kernel's backward loop (kernels/mhc/mhc_sinkhorn_bwd.py), index for index, with a ring of ``slots``
    states: segments from the end, each recomputing the forward from the logits."""
    ring = [None] * slots
    gv = go
    n_states = 2 * repeat
    for seg in range(-(-n_states // slots)):
        hi = n_states - seg * slots
        lo = max(hi - slots, 0)
        v = refs._softmax(x)
        for h in range(hi - 1):
            if h >= lo:
                ring[h - lo] = v
            if h == 0:
                v = refs._add(v, eps)
            else:
                dim = -2 if h % 2 == 1 else -1
                v = refs._div(v, refs._add(refs._sum(v, dim), eps))
        ring[hi - 1 - lo] = v
        for q in range(hi - max(lo, 1)):
            h = hi - 1 - q
            u = ring[h - lo]
            dim = -2 if h % 2 == 1 else -1
            s = refs._add(refs._sum(u, dim), eps)
            t = refs._div(refs._sum(refs._mul(gv, u), dim), s)
            gv = refs._div(refs._add(gv, -t), s)
        if lo == 0:
            u = ring[0]
            gv = refs._mul(refs._add(gv, -refs._sum(refs._mul(gv, u), -1)), u)
    return gv


@pytest.mark.parametrize("repeat", [1, 2, 3, 19, 20, 21, 40, 41, 57])
@pytest.mark.parametrize("slots", [SINKHORN_BWD_SLOTS, 2, 3, 7])
def test_segmented_backward_is_bit_identical(repeat, slots):
    g = torch.Generator().manual_seed(repeat * 100 + slots)
    x, go = _logits(g, (16, 4, 4), 2.0), torch.randn(16, 4, 4, generator=g)
    assert torch.equal(_segmented_bwd(go, x, repeat, 1e-6, slots), mhc_sinkhorn_bwd_ref(go, x, repeat, 1e-6))


SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 88.0, -88.0, 1e30, -1e30, 1e-40]


@settings(max_examples=60, deadline=None)
@given(vals=st.lists(st.sampled_from(SPECIALS) | st.floats(-30, 30, width=32), min_size=16, max_size=16),
       repeat=st.sampled_from([1, 3, 10]))
def test_special_values_follow_the_formulas(peer_mhc, vals, repeat):
    """NaN or +inf anywhere, or a row of -inf, makes the whole matrix NaN (in both); otherwise finite and close."""
    x = torch.tensor(vals, dtype=torch.float32).view(1, 4, 4)
    got = mhc_sinkhorn_fwd_ref(x, repeat, 1e-6)
    want = peer_mhc.sinkhorn_normalize_ref(x, repeat, 1e-6)
    poisoned = bool(torch.isnan(x).any() or torch.isposinf(x).any() or torch.isneginf(x).all(-1).any())
    assert bool(torch.isnan(got).all()) == poisoned and bool(torch.isnan(want).all()) == poisoned
    if not poisoned:
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    gb = mhc_sinkhorn_bwd_ref(torch.ones_like(x), x, repeat, 1e-6)
    if poisoned:
        assert torch.isnan(gb).all()


def test_ordered_refs_on_empty():
    x = torch.empty(0, 4, 4)
    assert mhc_sinkhorn_fwd_ref(x, 10, 1e-6).shape == (0, 4, 4)
    assert mhc_sinkhorn_bwd_ref(x, x, 10, 1e-6).shape == (0, 4, 4)


# ----------------------------------------------------------------------------------------------------------------
# the fused pre-block against the unfused chain, both as ordered CPU references. The chain's three other ops
# (reduce/rmsnorm, split mixes, apply mix) are implemented here from their stated orders (their helpers' ordered
# references were not available when this was written); the Sinkhorn is ours.


def _chain_reduce_rmsnorm(out_mul_splitted, sqrsum_splitted, rms_group_size, rms_eps):
    """mhc_reduce_partials_and_rmsnorm_fwd: [S, n, G, m3], [S, n, G] -> out [n, m3] (out_mul, sqrsum kept too)."""
    s_count, n, groups, m3 = out_mul_splitted.shape
    out = torch.zeros(n, m3)
    for k in range(groups):
        sq = torch.zeros(n)
        om = torch.zeros(n, m3)
        for s in range(s_count):
            sq = refs._add(sq, sqrsum_splitted[s, :, k])
            om = refs._add(om, out_mul_splitted[s, :, k])
        r = torch.rsqrt(refs._add(refs._div(sq, float(rms_group_size)), rms_eps))
        out = fma_f32(om, r.unsqueeze(-1), out)
    return out


def _chain_split_mixes(input_mixes, scale, base, m, post_mult, pre_eps):
    m3 = m * (m + 2)
    s = torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m3 - 2 * m)])
    z = fma_f32(input_mixes, s, base)
    sig = refs._div(torch.ones_like(z), refs._add(torch.exp(-z), 1.0))
    return refs._add(sig[:, :m], pre_eps), refs._mul(sig[:, m:2 * m], post_mult), z[:, 2 * m:]


def _chain_apply_mix(x, mix):
    xf = x.float()
    o = refs._mul(mix[:, :1], xf[:, 0])
    for i in range(1, x.shape[1]):
        o = fma_f32(mix[:, i:i + 1], xf[:, i], o)
    return o.to(torch.bfloat16)


def _chain(gm, gs, scale, base, residual, rms_eps, pre_eps, sk_eps, post_mult, repeat, n_splits):
    n, m, h = residual.shape
    mixes = _chain_reduce_rmsnorm(gm.unsqueeze(2), gs.unsqueeze(2), m * h, rms_eps)
    pre, post, comb = _chain_split_mixes(mixes, scale, base, m, post_mult, pre_eps)
    comb = mhc_sinkhorn_fwd_ref(comb.reshape(n, m, m), repeat, sk_eps).reshape(n, m * m)
    return post, comb, _chain_apply_mix(residual, pre)


def _fuse_inputs(g, n, h, s, m=4, special=False):
    m3 = m * (m + 2)
    residual = (torch.randn(n, m, h, generator=g) * (1 + 0.01 * torch.arange(m)).view(1, m, 1)).bfloat16()
    fn = torch.randn(m3, m * h, generator=g) * 1e-4
    flat = residual.float().view(n, m * h)
    chunks = torch.arange(m * h).chunk(s) if n else [torch.arange(0)] * s
    gm = torch.stack([flat[:, c] @ fn[:, c].T for c in chunks]) if n else torch.zeros(s, 0, m3)
    gs = torch.stack([flat[:, c].square().sum(-1) for c in chunks]) if n else torch.zeros(s, 0)
    scale, base = torch.randn(3, generator=g) * 0.1, torch.randn(m3, generator=g) * 0.1
    if special and n:
        gm[0, 0, 0] = NAN
        gm[min(1, s - 1), min(1, n - 1), 9] = INF
        gs[:, min(2, n - 1)] = 0.0
        gm[:, min(3, n - 1)] = -0.0
        base[3] = -0.0
        residual[0, 1, :3] = torch.tensor([INF, -INF, NAN]).bfloat16()
        residual[min(4, n - 1), :, :8] = -0.0
    return gm, gs, scale, base, residual


def _assert_same(got, want):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(torch.isnan(a), torch.isnan(b))
        keep = ~torch.isnan(a)
        assert torch.equal(a[keep], b[keep])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 9), h=st.sampled_from([8, 64, 1280]), s=st.sampled_from([1, 3, 16]),
       repeat=st.sampled_from([1, 10, 20]), post_mult=st.sampled_from([1.0, 2.0, 1.1]),
       eps=st.sampled_from([1e-6, 1e-3]), special=st.booleans(), seed=st.integers(0, 2**16))
def test_big_fuse_ref_is_the_unfused_chain(n, h, s, repeat, post_mult, eps, special, seed):
    gm, gs, scale, base, residual = _fuse_inputs(torch.Generator().manual_seed(seed), n, h, s, special=special)
    args = (gm, gs, scale, base, residual, eps, eps, eps, post_mult, repeat, s)
    _assert_same(mhc_pre_big_fuse_fwd_ref(*args), _chain(*args))


@pytest.mark.parametrize("h", [1280, 2560])
def test_big_fuse_ref_matches_peer_chain(peer_mhc, h):
    n, m, s = 64, 4, 16
    gm, gs, scale, base, residual = _fuse_inputs(torch.Generator().manual_seed(h), n, h, s)
    post, comb, li = mhc_pre_big_fuse_fwd_ref(gm, gs, scale, base, residual, 1e-6, 1e-6, 1e-6, 2.0, 20, s)
    mixes = gm.double().sum(0) * torch.rsqrt(gs.double().sum(0) / (m * h) + 1e-6).unsqueeze(-1)
    pre_w, post_w, comb_w = peer_mhc.mhc_pre_split_mixes_ref(mixes.unsqueeze(0), scale.double(), base.double(), m,
                                                             2.0, 1e-6)
    comb_w = peer_mhc.sinkhorn_normalize_ref(comb_w, 20, 1e-6)
    li_w = peer_mhc.mhc_pre_apply_mix_ref(residual.double().unsqueeze(0), pre_w)
    torch.testing.assert_close(post.double(), post_w.view(n, m), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(comb.double(), comb_w.view(n, m * m), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(li.float(), li_w.view(n, h).float(), rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------------------------------------------
# argument errors of the public functions (CPU tensors: every check raises before the CUDA one)

F32 = torch.float32


def _mats(n=3, m=4, k=3):
    return [torch.zeros(n, m, m) for _ in range(k)]


def test_sinkhorn_fwd_errors():
    fwd = kernelkiln.mhc.mhc_sinkhorn_fwd
    x, o = _mats(k=2)
    with pytest.raises(TypeError, match="comb_res_mix must be a torch.Tensor"):
        fwd([1.0], o, 10, 1e-6)
    with pytest.raises(TypeError, match="comb_res_mix has dtype torch.bfloat16"):
        fwd(x.bfloat16(), o, 10, 1e-6)
    with pytest.raises(TypeError, match="comb_res_mix_out has dtype torch.float64"):
        fwd(x, o.double(), 10, 1e-6)
    with pytest.raises(ValueError, match="comb_res_mix must be 3-D"):
        fwd(x.view(3, 16), o, 10, 1e-6)
    with pytest.raises(ValueError, match=r"mhc_mult\) in \[4\]"):
        fwd(torch.zeros(3, 2, 2), torch.zeros(3, 2, 2), 10, 1e-6)
    with pytest.raises(ValueError, match=r"mhc_mult\) in \[4\]"):
        fwd(torch.zeros(3, 4, 3), torch.zeros(3, 4, 3), 10, 1e-6)
    with pytest.raises(ValueError, match="comb_res_mix_out must have comb_res_mix's shape"):
        fwd(x, torch.zeros(2, 4, 4), 10, 1e-6)
    with pytest.raises(ValueError, match="comb_res_mix must be contiguous"):
        fwd(x.transpose(1, 2), o, 10, 1e-6)
    with pytest.raises(ValueError, match="comb_res_mix_out must be contiguous"):
        fwd(x, o.transpose(1, 2), 10, 1e-6)
    with pytest.raises(ValueError, match="comb_res_mix_out is on meta but comb_res_mix is on cpu"):
        fwd(x, o.to("meta"), 10, 1e-6)
    with pytest.raises(TypeError, match="repeat must be a Python int"):
        fwd(x, o, 10.0, 1e-6)
    with pytest.raises(TypeError, match="repeat must be a Python int"):
        fwd(x, o, True, 1e-6)
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        fwd(x, o, 0, 1e-6)
    with pytest.raises(TypeError, match="eps must be a Python float"):
        fwd(x, o, 10, "1e-6")
    with pytest.raises(ValueError, match="comb_res_mix is on cpu; KernelKiln kernels need a CUDA tensor"):
        fwd(x, o, 10, 1e-6)
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        fwd(x, x, 1, 0)  # in place, int eps: valid arguments


def test_sinkhorn_bwd_errors():
    bwd = kernelkiln.mhc.mhc_sinkhorn_bwd
    go, x, gi = _mats()
    with pytest.raises(TypeError, match="grad_output must be a torch.Tensor"):
        bwd(None, x, gi, 10, 1e-6)
    with pytest.raises(TypeError, match="x has dtype torch.float16"):
        bwd(go, x.half(), gi, 10, 1e-6)
    with pytest.raises(TypeError, match="grad_input has dtype torch.bfloat16"):
        bwd(go, x, gi.bfloat16(), 10, 1e-6)
    with pytest.raises(ValueError, match=r"grad_output must have shape \[n, m, m\]"):
        bwd(torch.zeros(3, 8, 8), torch.zeros(3, 8, 8), torch.zeros(3, 8, 8), 10, 1e-6)
    with pytest.raises(ValueError, match="x must have grad_output's shape"):
        bwd(go, torch.zeros(4, 4, 4), gi, 10, 1e-6)
    with pytest.raises(ValueError, match="grad_input must have grad_output's shape"):
        bwd(go, x, torch.zeros(2, 4, 4), 10, 1e-6)
    with pytest.raises(ValueError, match="x must be contiguous"):
        bwd(go, x.transpose(1, 2), gi, 10, 1e-6)
    with pytest.raises(ValueError, match="grad_input is on meta"):
        bwd(go, x, gi.to("meta"), 10, 1e-6)
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        bwd(go, x, gi, -1, 1e-6)
    with pytest.raises(TypeError, match="eps must be a Python float"):
        bwd(go, x, gi, 10, torch.tensor(1e-6))
    with pytest.raises(ValueError, match="grad_output is on cpu; KernelKiln kernels need a CUDA tensor"):
        bwd(go, x, gi, 10, 1e-6)


def _fuse_args(n=3, h=64, s=16, m=4):
    m3 = m * (m + 2)
    return dict(gemm_out_mul=torch.zeros(s, n, m3), gemm_out_sqrsum=torch.zeros(s, n), mhc_scale=torch.zeros(3),
                mhc_base=torch.zeros(m3), residual=torch.zeros(n, m, h, dtype=torch.bfloat16),
                post_mix=torch.zeros(n, m), comb_mix=torch.zeros(n, m * m),
                layer_input=torch.zeros(n, h, dtype=torch.bfloat16), rms_eps=1e-6, mhc_pre_eps=1e-6,
                mhc_sinkhorn_eps=1e-6, mhc_post_mult_value=2.0, sinkhorn_repeat=20, n_splits=s)


FUSE_ERRORS = [
    ({"residual": torch.zeros(3, 4, 64)}, TypeError, "residual has dtype torch.float32"),
    ({"residual": torch.zeros(3, 256, dtype=torch.bfloat16)}, ValueError, "residual must be 3-D"),
    ({"residual": torch.zeros(3, 2, 64, dtype=torch.bfloat16)}, ValueError, r"mhc_mult\) in \[4\]"),
    ({"residual": torch.zeros(3, 4, 60, dtype=torch.bfloat16)}, ValueError, "positive multiple of 8, got 60"),
    ({"residual": torch.zeros(3, 4, 0, dtype=torch.bfloat16)}, ValueError, "positive multiple of 8, got 0"),
    ({"residual": torch.zeros(3, 64, 4, dtype=torch.bfloat16).transpose(1, 2)}, ValueError,
     "residual must be contiguous"),
    ({"n_splits": 16.0}, TypeError, "n_splits must be a Python int"),
    ({"n_splits": 0}, ValueError, "n_splits must be >= 1"),
    ({"n_splits": 8}, ValueError, r"gemm_out_mul must have shape \[n_splits, n, m\(m\+2\)\] = \[8, 3, 24\]"),
    ({"gemm_out_mul": torch.zeros(16, 3, 24, dtype=torch.bfloat16)}, TypeError, "gemm_out_mul has dtype"),
    ({"gemm_out_mul": torch.zeros(16, 3, 1, 24)}, ValueError, "gemm_out_mul must be 3-D"),
    ({"gemm_out_mul": torch.zeros(16, 24, 3).transpose(1, 2)}, ValueError, "gemm_out_mul must be contiguous"),
    ({"gemm_out_sqrsum": torch.zeros(16, 4)}, ValueError, r"gemm_out_sqrsum must have shape \[n_splits, n\]"),
    ({"gemm_out_sqrsum": torch.zeros(16, 3).double()}, TypeError, "gemm_out_sqrsum has dtype torch.float64"),
    ({"mhc_scale": torch.zeros(1)}, ValueError, r"mhc_scale must have shape \[3\]"),
    ({"mhc_scale": torch.zeros(3).bfloat16()}, TypeError, "mhc_scale has dtype"),
    ({"mhc_base": torch.zeros(16)}, ValueError, r"mhc_base must have shape \[m\(m\+2\)\] = \[24\]"),
    ({"post_mix": torch.zeros(3, 4, 1)}, ValueError, "post_mix must be 2-D"),
    ({"post_mix": torch.zeros(3, 5)}, ValueError, r"post_mix must have shape \[n, m\]"),
    ({"comb_mix": torch.zeros(3, 4, 4)}, ValueError, "comb_mix must be 2-D"),
    ({"comb_mix": torch.zeros(16, 3).t()}, ValueError, "comb_mix must be contiguous"),
    ({"layer_input": torch.zeros(3, 64)}, TypeError, "layer_input has dtype torch.float32"),
    ({"layer_input": torch.zeros(3, 72, dtype=torch.bfloat16)}, ValueError, r"layer_input must have shape \[n, H\]"),
    ({"rms_eps": None}, TypeError, "rms_eps must be a Python float"),
    ({"mhc_pre_eps": "x"}, TypeError, "mhc_pre_eps must be a Python float"),
    ({"mhc_post_mult_value": False}, TypeError, "mhc_post_mult_value must be a Python float"),
    ({"mhc_sinkhorn_eps": [1e-6]}, TypeError, "mhc_sinkhorn_eps must be a Python float"),
    ({"sinkhorn_repeat": 0}, ValueError, "sinkhorn_repeat must be >= 1"),
    ({"sinkhorn_repeat": 2.5}, TypeError, "sinkhorn_repeat must be a Python int"),
    ({"post_mix": torch.zeros(3, 4, device="meta")}, ValueError, "post_mix is on meta but residual is on cpu"),
    ({}, ValueError, "residual is on cpu; KernelKiln kernels need a CUDA tensor"),
]


@pytest.mark.parametrize("change, exc, match", FUSE_ERRORS)
def test_big_fuse_errors(change, exc, match):
    args = {**_fuse_args(), **change}
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_pre_big_fuse_fwd(**args)


def test_big_fuse_default_n_splits_is_16():
    args = _fuse_args(s=16)
    del args["n_splits"]
    with pytest.raises(ValueError, match="need a CUDA tensor"):  # 16 partials accepted without naming n_splits
        kernelkiln.mhc.mhc_pre_big_fuse_fwd(**args)
    args = _fuse_args(s=4)
    del args["n_splits"]
    with pytest.raises(ValueError, match=r"\[16, 3, 24\]"):
        kernelkiln.mhc.mhc_pre_big_fuse_fwd(*args.values())


def test_fake_implementations_check_and_return_none():
    """The register_fake functions run the same checks (no CUDA one) and produce nothing."""
    from kernelkiln.mhc import _mhc_pre_big_fuse_fwd as bf, _mhc_sinkhorn_bwd as sb, _mhc_sinkhorn_fwd as sf
    x, o, g = _mats()
    assert sf._mhc_sinkhorn_fwd_fake(x, o, 10, 1e-6) is None
    assert sb._mhc_sinkhorn_bwd_fake(x, o, g, 10, 1e-6) is None
    assert bf._mhc_pre_big_fuse_fwd_fake(*_fuse_args().values()) is None
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        sf._mhc_sinkhorn_fwd_fake(x, o, 0, 1e-6)
    with pytest.raises(ValueError, match="positive multiple of 8"):
        bf._mhc_pre_big_fuse_fwd_fake(*{**_fuse_args(), "residual": torch.zeros(3, 4, 4, dtype=torch.bfloat16)
                                        }.values())
