"""The mHC mix ops on the CPU (head mix, split mixes, fn/normw merge, split-K reduce + RMS norm, and backwards): our
references against the peer's (tile_kernels 2.1.0's torch/mhc.py, loaded by path), the ordered backward references
against autograd through the peer's forms, the vectorized partial layouts against a scalar emulation of the kernels'
loops (bit for bit), and every argument error of the public functions."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkiln
from kernelkiln.torch import (mhc_fn_normw_merge_bwd_ref, mhc_fn_normw_merge_fwd_ref, mhc_head_compute_mix_bwd_ref,
                              mhc_head_compute_mix_fwd_ref, mhc_head_compute_mix_ref, mhc_pre_norm_fn_partials_ref,
                              mhc_pre_norm_fn_ref, mhc_pre_split_mixes_bwd_ref, mhc_pre_split_mixes_fwd_ref,
                              mhc_pre_split_mixes_ref, mhc_reduce_partials_and_rmsnorm_bwd_ref,
                              mhc_reduce_partials_and_rmsnorm_fwd_ref)
from kernelkiln.torch.fused import fma_f32

NAN, INF = float("nan"), float("inf")
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1e30, -1e30, 1e-40]


@pytest.fixture(scope="module")
def peer_mhc(peer_reference):
    """The peer's torch/mhc.py (loaded by path: tests/conftest.py's peer_reference)."""
    return peer_reference("torch/mhc.py")


def _bits_equal(a, b):
    """Same shape and bits, NaNs compared as NaNs (torch.equal calls NaN unequal)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.isnan(), b.isnan())
    assert torch.equal(a[~a.isnan()].view(torch.int32), b[~b.isnan()].view(torch.int32))


def _poke(t, g, values, count=3):
    """Put ``count`` of ``values`` at random places of t (in place)."""
    if t.numel():
        flat = t.view(-1)
        for _ in range(count):
            i = int(torch.randint(0, flat.numel(), (1,), generator=g))
            flat[i] = values[int(torch.randint(0, len(values), (1,), generator=g))]
    return t


# ---------------------------------------------------------------------------------------- the peer's forms
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), m=st.sampled_from([2, 4, 8]), special=st.booleans(), seed=st.integers(0, 2**16))
def test_head_mix_ref_is_the_peers(peer_mhc, n, m, special, seed):
    g = torch.Generator().manual_seed(seed)
    x, scale, base = torch.randn(n, m, generator=g), torch.randn(1, generator=g), torch.randn(m, generator=g)
    if special:
        _poke(x, g, SPECIAL)
    _bits_equal(mhc_head_compute_mix_ref(x, scale, base, 1e-6), peer_mhc.mhc_head_compute_mix_ref(x, scale, base, 1e-6))


@settings(max_examples=40, deadline=None)
@given(a=st.integers(1, 3), b=st.integers(0, 20), m=st.sampled_from([2, 4, 8]), special=st.booleans(),
       post_mult=st.sampled_from([1.0, 2.0, 0.7]), seed=st.integers(0, 2**16))
def test_split_mixes_ref_is_the_peers(peer_mhc, a, b, m, special, post_mult, seed):
    g = torch.Generator().manual_seed(seed)
    m3 = m * (m + 2)
    x, scale, base = torch.randn(a, b, m3, generator=g), torch.randn(3, generator=g), torch.randn(m3, generator=g)
    if special:
        _poke(x, g, SPECIAL)
    ours = mhc_pre_split_mixes_ref(x, scale, base, m, post_mult, 1e-6)
    theirs = peer_mhc.mhc_pre_split_mixes_ref(x, scale, base, m, post_mult, 1e-6)
    for o, t, shape in zip(ours, theirs, [(a, b, m, 1), (a, b, m, 1), (a, b, m, m)]):
        assert o.shape == shape
        _bits_equal(o, t)


@settings(max_examples=15, deadline=None)
@given(a=st.integers(1, 2), b=st.integers(1, 6), h=st.sampled_from([64, 128, 320]), use_w=st.booleans(),
       seed=st.integers(0, 2**16))
def test_pre_norm_fn_ref_is_the_peers(peer_mhc, a, b, h, use_w, seed):
    g = torch.Generator().manual_seed(seed)
    m, m3 = 4, 24
    residual = torch.randn(a, b, m, h, generator=g).bfloat16()
    fn = torch.randn(m3, m * h, generator=g) * 1e-2
    w = torch.rand(m * h, generator=g) + 0.5 if use_w else None
    ours = mhc_pre_norm_fn_ref(residual, fn, w, 1e-6)
    theirs = peer_mhc.mhc_pre_norm_fn_ref(residual, fn, w, 1e-6)
    assert ours.shape == theirs.shape == (a, b, m3)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(b=st.integers(0, 13), h=st.sampled_from([64, 128]), splits=st.sampled_from([1, 2, 4, 16]),
       seed=st.integers(0, 2**16))
def test_pre_norm_fn_partials_ref_is_the_peers(peer_mhc, b, h, splits, seed):
    g = torch.Generator().manual_seed(seed)
    residual = torch.randn(1, b, 4, h, generator=g).bfloat16()
    fn = torch.randn(24, 4 * h, generator=g) * 1e-2
    om, sq = mhc_pre_norm_fn_partials_ref(residual, fn, splits)
    pom, psq = peer_mhc.mhc_pre_norm_fn_partials_ref(residual, fn, splits)
    assert om.shape == pom.shape == (splits, b, 1, 24) and sq.shape == psq.shape == (splits, b, 1)
    torch.testing.assert_close(om, pom, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(sq, psq, rtol=1e-6, atol=0)


@settings(max_examples=15, deadline=None)
@given(b=st.integers(1, 13), h=st.sampled_from([64, 256]), splits=st.sampled_from([1, 4, 16]),
       seed=st.integers(0, 2**16))
def test_reduce_rmsnorm_of_partials_is_the_pre_norm_fn(peer_mhc, b, h, splits, seed):
    """The split-K path of 2.1: the peer's partials through our ordered reduce/rmsnorm give its one-shot mixes."""
    g = torch.Generator().manual_seed(seed)
    residual = (torch.randn(1, b, 4, h, generator=g) * (1 + 0.01 * torch.arange(4)).view(1, 1, 4, 1)).bfloat16()
    fn = torch.randn(24, 4 * h, generator=g) * 1e-4
    om_s, sq_s = peer_mhc.mhc_pre_norm_fn_partials_ref(residual, fn, splits)
    om, sq, out = mhc_reduce_partials_and_rmsnorm_fwd_ref(om_s, sq_s, 4 * h, 1e-6)
    want = peer_mhc.mhc_pre_norm_fn_ref(residual, fn, None, 1e-6).view(b, 24)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(sq, sq_s.double().sum(0).float(), rtol=1e-6, atol=0)
    torch.testing.assert_close(om, om_s.double().sum(0).float(), rtol=1e-5, atol=1e-9)


# ---------------------------------------------------------------------------------------- ordered forwards
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), m=st.sampled_from([2, 4, 8]), eps=st.sampled_from([0.0, 1e-6, 1e-2]),
       seed=st.integers(0, 2**16))
def test_head_mix_fwd_ref_order(peer_mhc, n, m, eps, seed):
    """One fma then the IEEE sigmoid: exactly fma_f32's z through the sigmoid steps; within an ulp-scale distance
    of the peer's torch form (which rounds x·s before adding b)."""
    g = torch.Generator().manual_seed(seed)
    x, scale, base = torch.randn(n, m, generator=g) * 4, torch.randn(1, generator=g), torch.randn(m, generator=g)
    got = mhc_head_compute_mix_fwd_ref(x, scale, base, eps)
    z = fma_f32(x, scale, base)
    _bits_equal(got, (1.0 / (1.0 + torch.exp(-z))).float() + torch.tensor(eps, dtype=torch.float32))
    torch.testing.assert_close(got, peer_mhc.mhc_head_compute_mix_ref(x, scale, base, eps), rtol=0, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), m=st.sampled_from([2, 4, 8]), post_mult=st.sampled_from([1.0, 2.0]),
       special=st.booleans(), seed=st.integers(0, 2**16))
def test_split_mixes_fwd_ref_order(peer_mhc, n, m, post_mult, special, seed):
    g = torch.Generator().manual_seed(seed)
    m3 = m * (m + 2)
    x, scale, base = torch.randn(n, m3, generator=g), torch.randn(3, generator=g), torch.randn(m3, generator=g)
    if special:
        _poke(x, g, SPECIAL)
    pre, post, comb = mhc_pre_split_mixes_fwd_ref(x, scale, base, m, post_mult, 1e-6)
    assert pre.shape == post.shape == (n, m) and comb.shape == (n, m * m)
    # comb is the fma itself: the exactly rounded a·s + b (float64 holds the product exactly)
    s = torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)])
    _bits_equal(comb, fma_f32(x, s, base)[:, 2 * m:])
    ppre, ppost, pcomb = peer_mhc.mhc_pre_split_mixes_ref(x.unsqueeze(0), scale, base, m, post_mult, 1e-6)
    fin = torch.isfinite(x).all(dim=1)
    torch.testing.assert_close(pre[fin], ppre[0, fin, :, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(post[fin], ppost[0, fin, :, 0], rtol=0, atol=2e-6)
    torch.testing.assert_close(comb[fin], pcomb[0, fin].reshape(-1, m * m), rtol=1e-6, atol=1e-6)


def test_split_mixes_fwd_ref_special_values():
    """sigmoid(+inf) = 1, sigmoid(-inf) = 0, NaN stays NaN; comb carries inf and NaN through."""
    m = 4
    x = torch.zeros(1, 24)
    x[0, :4] = torch.tensor([INF, -INF, NAN, 0.0])
    x[0, 8:12] = torch.tensor([INF, -INF, NAN, -0.0])
    pre, post, comb = mhc_pre_split_mixes_fwd_ref(x, torch.ones(3), torch.zeros(24), m, 2.0, 0.5)
    assert pre[0, 0] == 1.5 and pre[0, 1] == 0.5 and pre[0, 2].isnan() and pre[0, 3] == 1.0
    assert post[0].tolist() == [1.0] * 4
    assert comb[0, 0] == INF and comb[0, 1] == -INF and comb[0, 2].isnan()


@settings(max_examples=30, deadline=None)
@given(s=st.integers(1, 17), n=st.integers(0, 9), groups=st.integers(1, 3), m3=st.sampled_from([8, 24, 80]),
       special=st.booleans(), seed=st.integers(0, 2**16))
def test_reduce_rmsnorm_fwd_ref_order(s, n, groups, m3, special, seed):
    """Splits added in order from +0 (float64 emulation of each rounding), rsqrt of the IEEE quotient plus eps,
    then the plain product for group 0 and fma for later groups."""
    g = torch.Generator().manual_seed(seed)
    oms = torch.randn(s, n, groups, m3, generator=g) * torch.rand(s, 1, 1, 1, generator=g).exp()
    sqs = torch.rand(s, n, groups, generator=g) * 100
    if special:
        _poke(oms, g, SPECIAL)
        _poke(sqs, g, [0.0, INF, NAN])
    om, sq, out = mhc_reduce_partials_and_rmsnorm_fwd_ref(oms, sqs, 96, 1e-6)
    e_om, e_sq = torch.zeros(n, groups, m3), torch.zeros(n, groups)
    for i in range(s):
        e_om = (e_om.double() + oms[i].double()).float()
        e_sq = (e_sq.double() + sqs[i].double()).float()
    _bits_equal(om, e_om)
    _bits_equal(sq, e_sq)
    r = torch.rsqrt(((e_sq.double() / 96).float().double() + float(torch.tensor(1e-6).float())).float())
    e_out = om[:, 0] * r[:, :1]
    for k in range(1, groups):
        e_out = fma_f32(om[:, k], r[:, k:k + 1], e_out)
    _bits_equal(out, e_out)


def test_fn_normw_merge_fwd_ref_is_one_product(peer_mhc):
    g = torch.Generator().manual_seed(1)
    fn, w = torch.randn(24, 512, generator=g), torch.randn(512, generator=g)
    _poke(fn, g, SPECIAL, 10)
    _bits_equal(mhc_fn_normw_merge_fwd_ref(fn, w), (fn.double() * w.double()).float())


# ---------------------------------------------------------------------------------------- ordered backwards
def _head_bwd_peer_emulation(gz, x, num_ctas):
    """Scalar emulation of the peer's head-mix backward kernel as TileLang 0.1.15 lowers it (token_block_size 32,
    128 threads): CTA pid, thread tx, blocks w·P + pid in w order, elements tx, tx + 128, ... of each block's
    row-major [32, m] values; then tl::AllReduce's butterflies, offsets 64 .. 1 (scale) and 64 .. m (base; for
    m = 2 the peer reduces only threads 0..63, offsets 32 .. 2, the same sums since threads 64.. hold +0).
    Returns (base partials [P, m], scale partials [P, 1])."""
    n, m = gz.shape
    flat_g, flat_x = gz.reshape(-1), x.reshape(-1)
    blocks = -(-n // 32)
    steps = -(-blocks // num_ctas)
    acc_s = torch.zeros(num_ctas, 128)
    acc_b = torch.zeros(num_ctas, 128)
    one = lambda v: torch.tensor([v], dtype=torch.float32)  # noqa: E731
    for pid in range(num_ctas):
        for tx in range(128):
            for w in range(steps):
                blk = w * num_ctas + pid
                for e in range(tx, 32 * m, 128):
                    if blk * 32 + e // m >= n:
                        continue
                    i = blk * 32 * m + e
                    acc_s[pid, tx] = fma_f32(flat_g[i:i + 1], flat_x[i:i + 1], one(float(acc_s[pid, tx])))[0]
                    acc_b[pid, tx] = (acc_b[pid, tx:tx + 1] + flat_g[i:i + 1])[0]

    def butterfly(v, lowest):
        off = 64
        while off >= lowest:
            v = v + v[:, torch.arange(128) ^ off]
            off //= 2
        return v

    return butterfly(acc_b, m)[:, :m], butterfly(acc_s, 1)[:, :1]


@settings(max_examples=8, deadline=None)
@given(n=st.sampled_from([0, 1, 31, 33, 100, 300, 520]), m=st.sampled_from([2, 4, 8]), p=st.integers(1, 3),
       seed=st.integers(0, 2**16))
def test_head_mix_bwd_partials_follow_the_peer_kernel_loop(n, m, p, seed):
    g = torch.Generator().manual_seed(seed)
    x, go = torch.randn(n, m, generator=g), torch.randn(n, m, generator=g)
    scale, base = torch.randn(1, generator=g), torch.randn(m, generator=g)
    grad, sp, bp = mhc_head_compute_mix_bwd_ref(go, x, scale, base, p)
    assert grad.shape == (n, m) and sp.shape == (p, 1) and bp.shape == (p, m)
    pz = 1.0 / (1.0 + torch.exp(-fma_f32(x, scale, base)))
    gz = (pz * (1.0 - pz)) * go
    e_base, e_scale = _head_bwd_peer_emulation(gz, x, p)
    _bits_equal(bp, e_base)
    _bits_equal(sp, e_scale)
    _bits_equal(grad, gz * scale)


def _split_bwd_peer_emulation(g_of_row, a, n, m3, groups_of, num_ctas):
    """Scalar emulation of the peer's split-mixes backward and reduce kernels as TileLang 0.1.15 lowers them
    (token_block_size 32; the first warp of each 128-thread CTA holds the tokens). ``g_of_row(t)`` is token t's logit
    gradient row, a zero row's for t >= n. Returns (scale_grad [3], base_grad [m3])."""
    one = lambda v: torch.tensor([v], dtype=torch.float32)  # noqa: E731
    blocks = -(-n // 32)
    steps = -(-blocks // num_ctas)
    zero_a = torch.zeros(m3)
    part_b, part_s = torch.zeros(num_ctas, m3), torch.zeros(num_ctas, 3)
    for pid in range(num_ctas):
        base = torch.zeros(m3)
        lane_s = torch.zeros(32, 3)
        for w in range(steps):
            blk = w * num_ctas + pid
            if blk >= blocks:
                continue
            rows = [g_of_row(blk * 32 + lane) for lane in range(32)]
            arows = [a[blk * 32 + lane] if blk * 32 + lane < n else zero_a for lane in range(32)]
            for j in range(m3):
                v = torch.stack([(one(0.0) + r[j:j + 1])[0] for r in rows])
                for off in (16, 8, 4, 2, 1):
                    v = v + v[torch.arange(32) ^ off]
                base[j] = (base[j:j + 1] + v[0:1])[0]
                for lane in range(32):
                    k = groups_of(j)
                    lane_s[lane, k] = fma_f32(rows[lane][j:j + 1], arows[lane][j:j + 1], one(float(lane_s[lane, k])))[0]
        for off in (16, 8, 4, 2, 1):
            lane_s = lane_s + lane_s[torch.arange(32) ^ off]
        part_b[pid], part_s[pid] = base, lane_s[0]

    def reduce(parts):  # per column: thread tx adds rows tx, tx + 128, ...; then offsets 64 .. 1
        acc = torch.zeros(128, parts.shape[1])
        for r in range(parts.shape[0]):
            acc[r % 128] = acc[r % 128] + parts[r]
        for off in (64, 32, 16, 8, 4, 2, 1):
            acc = acc + acc[torch.arange(128) ^ off]
        return acc[0]

    return reduce(part_s), reduce(part_b)


@settings(max_examples=5, deadline=None)
@given(n=st.sampled_from([0, 1, 31, 33, 100, 300]), m=st.sampled_from([2, 4]), p=st.integers(1, 3),
       seed=st.integers(0, 2**16))
def test_split_mixes_bwd_follows_the_peer_kernels(n, m, p, seed):
    g = torch.Generator().manual_seed(seed)
    m3 = m * (m + 2)
    x = torch.randn(n, m3, generator=g)
    scale, base = torch.randn(3, generator=g), torch.randn(m3, generator=g)
    gp, gq, gc = torch.randn(n, m, generator=g), torch.randn(n, m, generator=g), torch.randn(n, m * m, generator=g)
    _, post, _ = mhc_pre_split_mixes_fwd_ref(x, scale, base, m, 2.0, 1e-6)
    grad, sg, bg = mhc_pre_split_mixes_bwd_ref(gp, gq, gc, x, post, scale, base, 2.0, p)

    def logit_grads(a_row, gp_row, gq_row, gc_row, q_row):
        pz = 1.0 / (1.0 + torch.exp(-fma_f32(a_row[:m], scale[0], base[:m])))
        return torch.cat([(gp_row * pz) * (1.0 - pz), (gq_row * q_row) * (1.0 - q_row / torch.full_like(q_row, 2.0)),
                          gc_row])

    zero_m = torch.zeros(m)
    zero_row = logit_grads(torch.zeros(m3), zero_m, zero_m, torch.zeros(m * m), zero_m)
    rows = [logit_grads(x[t], gp[t], gq[t], gc[t], post[t]) for t in range(n)]
    want_s, want_b = _split_bwd_peer_emulation(lambda t: rows[t] if t < n else zero_row, x, n, m3,
                                               lambda j: min(2, j // m), p)
    _bits_equal(bg, want_b)
    _bits_equal(sg, want_s)
    s = torch.cat([scale[0].expand(m), scale[1].expand(m), scale[2].expand(m * m)])
    if n:
        _bits_equal(grad, torch.stack(rows) * s)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 300), m=st.sampled_from([2, 4, 8]), p=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_head_mix_bwd_ref_is_the_gradient(peer_mhc, n, m, p, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, m, generator=g, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(1, generator=g, dtype=torch.float64, requires_grad=True)
    base = torch.randn(m, generator=g, dtype=torch.float64, requires_grad=True)
    go = torch.randn(n, m, generator=g, dtype=torch.float64)
    peer_mhc.mhc_head_compute_mix_ref(x, scale, base, 1e-6).backward(go)
    grad, sp, bp = mhc_head_compute_mix_bwd_ref(go.float(), x.detach().float(), scale.detach().float(),
                                                base.detach().float(), p)
    torch.testing.assert_close(grad.double(), x.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sp.double().sum(0), scale.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bp.double().sum(0), base.grad, rtol=1e-4, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 300), m=st.sampled_from([2, 4]), p=st.integers(1, 4),
       post_mult=st.sampled_from([1.0, 2.0]), seed=st.integers(0, 2**16))
def test_split_mixes_bwd_ref_is_the_gradient(peer_mhc, n, m, p, post_mult, seed):
    g = torch.Generator().manual_seed(seed)
    m3 = m * (m + 2)
    x = torch.randn(1, n, m3, generator=g, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    base = torch.randn(m3, generator=g, dtype=torch.float64, requires_grad=True)
    pre, post, comb = peer_mhc.mhc_pre_split_mixes_ref(x, scale, base, m, post_mult, 1e-6)
    gp, gq, gc = (torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (pre, post, comb))
    torch.autograd.backward([pre, post, comb], [gp, gq, gc])
    f = lambda t: t.detach().float().reshape(n, math.prod(t.shape[2:]))  # noqa: E731
    grad, sg, bg = mhc_pre_split_mixes_bwd_ref(f(gp), f(gq), f(gc), f(x), f(post), scale.detach().float(),
                                               base.detach().float(), post_mult, p)
    torch.testing.assert_close(grad.double(), x.grad[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sg.double(), scale.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bg.double(), base.grad, rtol=1e-4, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(0, 30), cols=st.sampled_from([4, 64, 256]), seed=st.integers(0, 2**16))
def test_fn_normw_merge_bwd_ref(rows, cols, seed):
    """Accumulates: fn_grad gets one fma per element, normw_grad the row-ordered fma sum added once; against the
    gradient of fn·normw from autograd (tolerance) and a float64 emulation of the order (bit for bit)."""
    g = torch.Generator().manual_seed(seed)
    fn, w, go = torch.randn(rows, cols, generator=g), torch.randn(cols, generator=g), torch.randn(rows, cols, generator=g)
    fg0, wg0 = torch.randn(rows, cols, generator=g), torch.randn(cols, generator=g)
    fg, wg = fg0.clone(), wg0.clone()
    assert mhc_fn_normw_merge_bwd_ref(fn, w, go, fg, wg) is None
    _bits_equal(fg, fma_f32(go, w, fg0))
    acc = torch.zeros(cols)
    for r in range(rows):
        acc = fma_f32(go[r], fn[r], acc)
    _bits_equal(wg, (wg0.double() + acc.double()).float())
    fnd, wd = fn.double().requires_grad_(), w.double().requires_grad_()
    (fnd * wd).backward(go.double())
    torch.testing.assert_close(fg.double() - fg0.double(), fnd.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(wg.double() - wg0.double(), wd.grad, rtol=1e-5, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 12), groups=st.integers(1, 3), m3=st.sampled_from([8, 24]), seed=st.integers(0, 2**16))
def test_reduce_rmsnorm_bwd_ref_is_the_gradient(n, groups, m3, seed):
    g = torch.Generator().manual_seed(seed)
    gs, eps = 96, 1e-6
    om = torch.randn(n, groups, m3, generator=g, dtype=torch.float64, requires_grad=True)
    sq = (torch.rand(n, groups, generator=g, dtype=torch.float64) * 50 + 1).requires_grad_()
    go = torch.randn(n, m3, generator=g, dtype=torch.float64)
    (om * (sq / gs + eps).rsqrt().unsqueeze(-1)).sum(1).backward(go)
    omg, sqg = mhc_reduce_partials_and_rmsnorm_bwd_ref(go.float(), om.detach().float(), sq.detach().float(), gs, eps)
    torch.testing.assert_close(omg.double(), om.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sqg.double(), sq.grad, rtol=1e-4, atol=1e-6)


def _lane_butterfly_dot(go, om):
    """The peer's lowered order as its 32 lanes run it: lane l holds fma(og_j, om_j, acc) over j = l, l + 32, ..
    from +0, then adds lane l ^ o for o = 16 .. 1."""
    lanes = [torch.zeros(om.shape[:-1]) for _ in range(32)]
    for j in range(om.shape[-1]):
        lanes[j % 32] = fma_f32(go[:, j:j + 1], om[..., j], lanes[j % 32])
    for o in (16, 8, 4, 2, 1):
        lanes = [lanes[la] + lanes[la ^ o] for la in range(32)]
    return lanes[0]


@pytest.mark.parametrize("m3", [8, 24, 48])
def test_reduce_rmsnorm_bwd_ref_order(m3):
    """d by fma per lane from +0 and the 32-lane butterfly; eps·gs rounded once from float64; two IEEE
    divisions."""
    g = torch.Generator().manual_seed(3)
    n, groups, gs, eps = 5, 2, 7, 1e-3
    go, om = torch.randn(n, m3, generator=g), torch.randn(n, groups, m3, generator=g)
    om[..., ::5] *= 1e4
    sq = torch.rand(n, groups, generator=g) * 10
    omg, sqg = mhc_reduce_partials_and_rmsnorm_bwd_ref(go, om, sq, gs, eps)
    r = torch.rsqrt(((sq.double() / gs).float().double() + float(torch.tensor(eps).float())).float())
    _bits_equal(omg, go.unsqueeze(1) * r.unsqueeze(-1))
    d = _lane_butterfly_dot(go, om)
    c = float(torch.tensor(eps * gs, dtype=torch.float64).float())
    step = ((d.double() * r.double()).float().double() / (sq.double() + c).float().double()).float()
    _bits_equal(sqg, (step.double() / -2).float())


def test_reduce_rmsnorm_bwd_ref_order_is_not_serial():
    """Columns 0 and 16 meet first in the butterfly and cancel, so column 8's 1 survives; a serial fma chain in
    column order ((1e8 + 1) - 1e8) gives 0."""
    go = torch.ones(1, 24)
    om = torch.zeros(1, 1, 24)
    om[0, 0, 0], om[0, 0, 8], om[0, 0, 16] = 1e8, 1.0, -1e8
    sq = torch.full((1, 1), 4.0)
    _, sqg = mhc_reduce_partials_and_rmsnorm_bwd_ref(go, om, sq, 4, 0.0)
    assert sqg.item() == -0.125  # d = 1, r = 1: (1 / 4) / -2


# ---------------------------------------------------------------------------------------- argument errors
def _head(n=10, m=4):
    return dict(input_mix=torch.randn(n, m), mhc_scale=torch.randn(1), mhc_base=torch.randn(m),
                output_mix=torch.empty(n, m), mhc_pre_eps=1e-6)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: {**a, "input_mix": a["input_mix"].double()}, TypeError, "input_mix has dtype"),
    (lambda a: {**a, "input_mix": torch.randn(10, 3)}, ValueError, r"input_mix.shape\[1\] \(mhc_mult\)"),
    (lambda a: {**a, "input_mix": torch.randn(10)}, ValueError, "input_mix must be 2-D"),
    (lambda a: {**a, "input_mix": torch.randn(4, 10).t()}, ValueError, "input_mix must be contiguous"),
    (lambda a: {**a, "mhc_scale": torch.randn(2)}, ValueError, r"mhc_scale must have shape \[1\]"),
    (lambda a: {**a, "mhc_base": torch.randn(3)}, ValueError, "mhc_base must have shape"),
    (lambda a: {**a, "mhc_base": torch.randn(4).half()}, TypeError, "mhc_base has dtype"),
    (lambda a: {**a, "output_mix": torch.empty(11, 4)}, ValueError, "output_mix must have shape"),
    (lambda a: {**a, "mhc_pre_eps": "x"}, TypeError, "mhc_pre_eps must be a Python float"),
    (lambda a: {**a, "token_block_size": -1}, ValueError, "token_block_size must be >= 0"),
    (lambda a: {**a, "token_block_size": 1.5}, TypeError, "token_block_size must be a Python int"),
    (lambda a: {**a, "mhc_scale": torch.randn(1, device="meta")}, ValueError, "must share a device"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_head_mix_fwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_head_compute_mix_fwd(**bad(_head()))


def _head_bwd(n=10, m=4, p=3):
    return dict(output_mix_grad=torch.randn(n, m), input_mix=torch.randn(n, m), mhc_scale=torch.randn(1),
                mhc_base=torch.randn(m), input_mix_grad=torch.empty(n, m), mhc_scale_grad_partial=torch.empty(p, 1),
                mhc_base_grad_partial=torch.empty(p, m), num_sms=p)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: {**a, "output_mix_grad": torch.randn(10, 2)}, ValueError, "output_mix_grad must have shape"),
    (lambda a: {**a, "input_mix": torch.randn(10, 5)}, ValueError, r"\(mhc_mult\) must be one of"),
    (lambda a: {**a, "input_mix_grad": torch.empty(10, 4, dtype=torch.bfloat16)}, TypeError,
     "input_mix_grad has dtype"),
    (lambda a: {**a, "num_sms": 0, "mhc_scale_grad_partial": torch.empty(0, 1),
                "mhc_base_grad_partial": torch.empty(0, 4)}, ValueError, "num_sms .* must be >= 1"),
    (lambda a: {**a, "num_sms": 2}, ValueError, r"mhc_scale_grad_partial must have shape \[num_sms, 1\]"),
    (lambda a: {**a, "mhc_base_grad_partial": torch.empty(3, 2)}, ValueError, "mhc_base_grad_partial must have"),
    (lambda a: {**a, "num_sms": 3.0}, TypeError, "num_sms must be a Python int"),
    (lambda a: {**a, "token_block_size": -2}, ValueError, "token_block_size"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_head_mix_bwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_head_compute_mix_bwd(**bad(_head_bwd()))


def _split(n=10, m=4):
    m3 = m * (m + 2)
    return dict(input_mixes=torch.randn(n, m3), mhc_scale=torch.randn(3), mhc_base=torch.randn(m3),
                pre_layer_mix=torch.empty(n, m), post_layer_mix=torch.empty(n, m), comb_res_mix=torch.empty(n, m * m),
                mhc_post_mult_value=2.0, mhc_pre_eps=1e-6)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: {**a, "pre_layer_mix": torch.empty(10, 3)}, ValueError, r"pre_layer_mix.shape\[1\] \(mhc_mult\)"),
    (lambda a: {**a, "pre_layer_mix": torch.empty(10, 4).double()}, TypeError, "pre_layer_mix has dtype"),
    (lambda a: {**a, "input_mixes": torch.randn(10, 20)}, ValueError, "input_mixes must have shape"),
    (lambda a: {**a, "input_mixes": torch.randn(24, 10).t()}, ValueError, "input_mixes must be contiguous"),
    (lambda a: {**a, "mhc_scale": torch.randn(1)}, ValueError, r"mhc_scale must have shape \[3\]"),
    (lambda a: {**a, "mhc_base": torch.randn(23)}, ValueError, "mhc_base must have shape"),
    (lambda a: {**a, "post_layer_mix": torch.empty(9, 4)}, ValueError, "post_layer_mix must have shape"),
    (lambda a: {**a, "comb_res_mix": torch.empty(10, 4, 4)}, ValueError, "comb_res_mix must be 2-D"),
    (lambda a: {**a, "mhc_post_mult_value": None}, TypeError, "mhc_post_mult_value must be a Python float"),
    (lambda a: {**a, "mhc_pre_eps": True}, TypeError, "mhc_pre_eps must be a Python float"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_split_mixes_fwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_pre_split_mixes_fwd(**bad(_split()))


def _split_bwd(n=10, m=4):
    m3 = m * (m + 2)
    return dict(pre_layer_mix_grad=torch.randn(n, m), post_layer_mix_grad=torch.randn(n, m),
                comb_res_mix_grad=torch.randn(n, m * m), input_mixes=torch.randn(n, m3),
                post_layer_mix=torch.rand(n, m), mhc_scale=torch.randn(3), mhc_base=torch.randn(m3),
                input_mixes_grad=torch.empty(n, m3), mhc_scale_grad=torch.empty(3), mhc_base_grad=torch.empty(m3),
                mhc_post_mult_value=2.0)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: _split_bwd(m=8), ValueError, r"pre_layer_mix_grad.shape\[1\] \(mhc_mult\) must be one of \[2, 4\]"),
    (lambda a: {**a, "post_layer_mix_grad": torch.randn(10, 2)}, ValueError, "post_layer_mix_grad must have shape"),
    (lambda a: {**a, "comb_res_mix_grad": torch.randn(10, 16).double()}, TypeError, "comb_res_mix_grad has dtype"),
    (lambda a: {**a, "input_mixes": torch.randn(10, 16)}, ValueError, "input_mixes must have shape"),
    (lambda a: {**a, "post_layer_mix": torch.rand(4, 10).t()}, ValueError, "post_layer_mix must be contiguous"),
    (lambda a: {**a, "input_mixes_grad": torch.empty(10, 25)}, ValueError, "input_mixes_grad must have shape"),
    (lambda a: {**a, "mhc_scale_grad": torch.empty(1, 3)}, ValueError, "mhc_scale_grad must be 1-D"),
    (lambda a: {**a, "mhc_base_grad": torch.empty(16)}, ValueError, "mhc_base_grad must have shape"),
    (lambda a: {**a, "mhc_post_mult_value": "2"}, TypeError, "mhc_post_mult_value must be a Python float"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_split_mixes_bwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_pre_split_mixes_bwd(**bad(_split_bwd()))


@pytest.mark.parametrize("bad, exc, match", [
    (lambda fn, w, o: (fn.double(), w, o), TypeError, "fn has dtype"),
    (lambda fn, w, o: (fn[:, :30].contiguous(), w[:30], o[:, :30].contiguous()), ValueError, "multiple of 4"),
    (lambda fn, w, o: (fn, w[:32], o), ValueError, "normw must have shape"),
    (lambda fn, w, o: (fn, w, o[:3]), ValueError, "out_fn must have shape"),
    (lambda fn, w, o: (fn.t().contiguous().t(), w, o), ValueError, "fn must be contiguous"),
    (lambda fn, w, o: (fn[0], w, o), ValueError, "fn must be 2-D"),
    (lambda fn, w, o: (torch.empty(70000, 4), w[:4], torch.empty(70000, 4)), ValueError, "must be <= 65535"),
    (lambda fn, w, o: (fn, w, o), ValueError, "need a CUDA tensor"),
])
def test_fn_normw_merge_fwd_argument_errors(bad, exc, match):
    fn, w = torch.randn(24, 64), torch.randn(64)
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_fn_normw_merge_fwd(*bad(fn, w, torch.empty(24, 64)))


@pytest.mark.parametrize("which, bad, exc, match", [
    (2, lambda t: t[:, :32].contiguous(), ValueError, "out_fn_grad must have shape"),
    (3, lambda t: t.bfloat16(), TypeError, "fn_grad has dtype"),
    (4, lambda t: t[:8], ValueError, "normw_grad must have shape"),
    (0, lambda t: t[:, :62].contiguous(), ValueError, "multiple of 4"),
    (None, None, ValueError, "need a CUDA tensor"),
])
def test_fn_normw_merge_bwd_argument_errors(which, bad, exc, match):
    args = [torch.randn(24, 64), torch.randn(64), torch.randn(24, 64), torch.zeros(24, 64), torch.zeros(64)]
    if which is not None:
        args[which] = bad(args[which])
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_fn_normw_merge_bwd(*args)


def _reduce(s=4, n=6, g=1, m3=24):
    return dict(out_mul_splitted=torch.randn(s, n, g, m3), sqrsum_splitted=torch.rand(s, n, g),
                out_mul=torch.empty(n, g, m3), sqrsum=torch.empty(n, g), out=torch.empty(n, m3),
                rms_group_size=96, rms_eps=1e-6, n_splits=s)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: {**a, "out_mul_splitted": a["out_mul_splitted"][0]}, ValueError, "out_mul_splitted must be 4-D"),
    (lambda a: {**a, "out_mul_splitted": a["out_mul_splitted"].double()}, TypeError, "out_mul_splitted has dtype"),
    (lambda a: _reduce(m3=22), ValueError, r"\(mhc_mult3\) must be a positive multiple of 4"),
    (lambda a: {**a, "sqrsum_splitted": torch.rand(4, 6)}, ValueError, "sqrsum_splitted must be 3-D"),
    (lambda a: {**a, "sqrsum_splitted": torch.rand(3, 6, 1)}, ValueError, "sqrsum_splitted must have shape"),
    (lambda a: {**a, "out_mul": torch.empty(6, 2, 24)}, ValueError, "out_mul must have shape"),
    (lambda a: {**a, "sqrsum": torch.empty(6, 1, dtype=torch.float16)}, TypeError, "sqrsum has dtype"),
    (lambda a: {**a, "out": torch.empty(6, 23)}, ValueError, "out must have shape"),
    (lambda a: {**a, "rms_group_size": 0}, ValueError, "rms_group_size .* must be >= 1"),
    (lambda a: {**a, "rms_group_size": 96.0}, TypeError, "rms_group_size must be a Python int"),
    (lambda a: {**a, "rms_eps": "1e-6"}, TypeError, "rms_eps must be a Python float"),
    (lambda a: {**a, "n_splits": 16}, ValueError, r"n_splits must equal out_mul_splitted.shape\[0\]"),
    (lambda a: {**a, "n_splits": 4.0}, TypeError, "n_splits must be a Python int"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_reduce_rmsnorm_fwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_reduce_partials_and_rmsnorm_fwd(**bad(_reduce()))


def _reduce_bwd(n=6, g=2, m3=24):
    return dict(out_grad=torch.randn(n, m3), out_mul=torch.randn(n, g, m3), sqrsum=torch.rand(n, g),
                out_mul_grad=torch.empty(n, g, m3), sqrsum_grad=torch.empty(n, g), rms_group_size=96, rms_eps=1e-6)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: {**a, "out_mul": torch.randn(6, 24)}, ValueError, "out_mul must be 3-D"),
    (lambda a: _reduce_bwd(m3=6), ValueError, "positive multiple of 4"),
    (lambda a: {**a, "out_grad": torch.randn(6, 20)}, ValueError, "out_grad must have shape"),
    (lambda a: {**a, "sqrsum": torch.rand(6, 1)}, ValueError, "sqrsum must have shape"),
    (lambda a: {**a, "out_mul_grad": torch.empty(6, 2, 24).double()}, TypeError, "out_mul_grad has dtype"),
    (lambda a: {**a, "sqrsum_grad": torch.empty(2, 6).t()}, ValueError, "sqrsum_grad must be contiguous"),
    (lambda a: {**a, "rms_group_size": -1}, ValueError, "rms_group_size"),
    (lambda a: {**a, "rms_eps": None}, TypeError, "rms_eps must be a Python float"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_reduce_rmsnorm_bwd_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.mhc.mhc_reduce_partials_and_rmsnorm_bwd(**bad(_reduce_bwd()))


def test_contracts_offer_what_the_checks_accept():
    """The m values the op checks accept are the contracts' (so a missing variant is a manifest gap, not an
    unbuildable request), and every representative variant builds."""
    from kernelkiln_contract import mhc_mixes as c
    assert c.MHC_HEAD_COMPUTE_MIX_FWD.params[0].values == c.MHC_MULTS
    assert c.MHC_PRE_SPLIT_MIXES_BWD.params[0].values == c.SPLIT_BWD_MULTS
    assert set(c.SPLIT_BWD_MULTS) <= set(c.MHC_MULTS)
    assert all(c.mult3(m) % c.RMS_VEC == 0 and c.mult3(m) + 3 <= c.SPLIT_REDUCE_THREADS for m in c.MHC_MULTS)
