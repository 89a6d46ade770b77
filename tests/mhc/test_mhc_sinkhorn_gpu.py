"""mhc_sinkhorn_fwd / mhc_sinkhorn_bwd / mhc_pre_big_fuse_fwd on the GPU: bit-identical to the ordered references
evaluated on CUDA tensors, within the peer's tolerance of its torch reference (and of autograd through it), the
backward's segmented recomputation (repeat > 20), in-place calls, special values, n = 0, and the fused pre-block
torch.equal to the unfused chain of this package's kernels on the peer's test shapes."""
import pytest
import torch

import kernelkiln
from bitwise import assert_bitwise
from kernelkiln._ops.launch import has_variant
from kernelkiln.torch import (mhc_pre_big_fuse_fwd_ref, mhc_sinkhorn_bwd_ref, mhc_sinkhorn_fwd_ref,
                              sinkhorn_normalize_ref)
from kernelkiln_contract.mhc_sinkhorn import MHC_PRE_BIG_FUSE_FWD, MHC_SINKHORN_BWD, MHC_SINKHORN_FWD

pytestmark = pytest.mark.gpu
M = 4
NAN, INF = float("nan"), float("inf")


def _need(contract, m=M):
    if not has_variant(contract, contract.key(mhc_mult=m), 0):
        pytest.skip(f"{contract.op} with mhc_mult={m} is not in this build's manifest")


def calc_diff(x, y):
    """The peer's testing.numeric.calc_diff: Σ(x−y)² / Σ(x²+y²) in float64."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return ((x - y).square().sum() / denom).item() if denom > 0 else 0.0


def _poisoned(shape, dtype=torch.float32):
    t = torch.empty(shape, dtype=dtype, device="cuda")
    if dtype == torch.float32:
        t.fill_(NAN)
    else:
        t.view(torch.uint8).fill_(0xFF)
    return t


def _assert_same_nan(got, want, what):
    """Bit for bit where finite or inf; NaN exactly where the reference has NaN (payloads may differ)."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{what}: NaN positions differ"
    assert_bitwise(got[~nan], want[~nan], what)


# ----------------------------------------------------------------------------------------------------------------
# Sinkhorn forward / backward


def _opcheck_fwd():
    x = torch.randn(37, M, M, device="cuda")
    return (x, torch.empty_like(x), 20, 1e-6), {}


def _opcheck_bwd():
    x = torch.randn(37, M, M, device="cuda")
    return (torch.randn_like(x), x, torch.empty_like(x), 20, 1e-6), {}


@pytest.mark.parametrize("n0", [1, 2])
@pytest.mark.parametrize("n1", [1, 1024, 4096])
@pytest.mark.parametrize("repeat", [10, 20])
def test_sinkhorn_fwd(seed, n0, n1, repeat):
    _need(MHC_SINKHORN_FWD)
    x = torch.randn(n0, n1, M, M, device="cuda").view(-1, M, M)
    out = _poisoned(x.shape)
    assert kernelkiln.mhc.mhc_sinkhorn_fwd(x, out, repeat, 1e-6) is None
    assert_bitwise(out, mhc_sinkhorn_fwd_ref(x, repeat, 1e-6), "mhc_sinkhorn_fwd")
    torch.testing.assert_close(out, sinkhorn_normalize_ref(x, repeat, 1e-6))


@pytest.mark.parametrize("n", [3, 13, 1023, 8193])
@pytest.mark.parametrize("repeat, eps, scale", [(1, 1e-6, 1.0), (3, 1e-2, 4.0), (20, 1e-6, 10.0), (50, 0.0, 1.0)])
def test_sinkhorn_fwd_tails_and_scalars(seed, n, repeat, eps, scale):
    _need(MHC_SINKHORN_FWD)
    x = torch.randn(n, M, M, device="cuda") * scale
    out = _poisoned(x.shape)
    kernelkiln.mhc.mhc_sinkhorn_fwd(x, out, repeat, eps)
    assert_bitwise(out, mhc_sinkhorn_fwd_ref(x, repeat, eps), "mhc_sinkhorn_fwd")


def test_sinkhorn_fwd_in_place(seed):
    _need(MHC_SINKHORN_FWD)
    x = torch.randn(1000, M, M, device="cuda")
    want = mhc_sinkhorn_fwd_ref(x, 20, 1e-6)
    kernelkiln.mhc.mhc_sinkhorn_fwd(x, x, 20, 1e-6)
    assert_bitwise(x, want, "mhc_sinkhorn_fwd in place")


@pytest.mark.parametrize("n0", [1, 2])
@pytest.mark.parametrize("n1", [1, 1024, 4096])
@pytest.mark.parametrize("repeat", [10, 20])
def test_sinkhorn_bwd(seed, n0, n1, repeat):
    _need(MHC_SINKHORN_BWD)
    x = torch.randn(n0, n1, M, M, device="cuda").view(-1, M, M)
    go = torch.randn_like(x)
    gi = _poisoned(x.shape)
    assert kernelkiln.mhc.mhc_sinkhorn_bwd(go, x, gi, repeat, 1e-6) is None
    assert_bitwise(gi, mhc_sinkhorn_bwd_ref(go, x, repeat, 1e-6), "mhc_sinkhorn_bwd")
    xd = x.double().requires_grad_()
    (want,) = torch.autograd.grad(sinkhorn_normalize_ref(xd, repeat, 1e-6), xd, go.double())
    assert calc_diff(gi, want) < 1e-9


@pytest.mark.parametrize("repeat", [1, 2, 19, 21, 40, 45, 100])
def test_sinkhorn_bwd_segments(seed, repeat):
    """Above 20 rounds the states no longer fit the ring: segments recomputing the forward, same bits."""
    _need(MHC_SINKHORN_BWD)
    x = torch.randn(333, M, M, device="cuda") * 2
    go = torch.randn_like(x)
    gi = _poisoned(x.shape)
    kernelkiln.mhc.mhc_sinkhorn_bwd(go, x, gi, repeat, 1e-6)
    assert_bitwise(gi, mhc_sinkhorn_bwd_ref(go, x, repeat, 1e-6), f"mhc_sinkhorn_bwd repeat={repeat}")


def test_sinkhorn_bwd_in_place(seed):
    _need(MHC_SINKHORN_BWD)
    x = torch.randn(500, M, M, device="cuda")
    go = torch.randn_like(x)
    want = mhc_sinkhorn_bwd_ref(go, x, 20, 1e-6)
    kernelkiln.mhc.mhc_sinkhorn_bwd(go, x, go, 20, 1e-6)
    assert_bitwise(go, want, "mhc_sinkhorn_bwd in place")


def test_sinkhorn_special_values(seed):
    _need(MHC_SINKHORN_FWD)
    _need(MHC_SINKHORN_BWD)
    x = torch.randn(64, M, M, device="cuda")
    x[0, 1, 2] = NAN
    x[1, 0, 0] = INF
    x[2, 3] = -INF  # a whole row: NaN matrix
    x[3, 0, :3] = -INF  # a row with one finite entry: fine
    x[4] = 0.0
    x[5, 2, 2] = -0.0
    x[6] = 88.0
    x[7, 1] = torch.tensor([1e30, -1e30, 1e-40, -1e-40])
    x[8] = 1e-45
    go = torch.randn_like(x)
    go[9, 0, 0] = INF
    go[10, 1, 1] = NAN
    out = _poisoned(x.shape)
    kernelkiln.mhc.mhc_sinkhorn_fwd(x, out, 10, 1e-6)
    _assert_same_nan(out, mhc_sinkhorn_fwd_ref(x, 10, 1e-6), "mhc_sinkhorn_fwd special values")
    assert torch.isnan(out[:3]).all() and torch.isfinite(out[3:]).all()
    gi = _poisoned(x.shape)
    kernelkiln.mhc.mhc_sinkhorn_bwd(go, x, gi, 10, 1e-6)
    _assert_same_nan(gi, mhc_sinkhorn_bwd_ref(go, x, 10, 1e-6), "mhc_sinkhorn_bwd special values")


def test_sinkhorn_empty():
    _need(MHC_SINKHORN_FWD)
    _need(MHC_SINKHORN_BWD)
    x = torch.empty(0, M, M, device="cuda")
    assert kernelkiln.mhc.mhc_sinkhorn_fwd(x, torch.empty_like(x), 20, 1e-6) is None
    assert kernelkiln.mhc.mhc_sinkhorn_bwd(x, x, torch.empty_like(x), 20, 1e-6) is None


# ----------------------------------------------------------------------------------------------------------------
# the fused pre-block


def _fuse_inputs(n, h, s=16, special=False):
    """The peer's test data: residual randn·(1 + 0.01·stream), fn randn·1e-4, scale and base randn·0.1; the
    partials are the split-K pieces of the norm GEMM (fp32, TF32 off)."""
    m3 = M * (M + 2)
    residual = (torch.randn(n, M, h, device="cuda") * (1 + 0.01 * torch.arange(M, device="cuda")).view(1, M, 1)
                ).bfloat16()
    fn = torch.randn(m3, M * h, device="cuda") * 1e-4
    flat = residual.float().view(n, M * h)
    chunks = torch.arange(M * h, device="cuda").chunk(s)
    with _no_tf32():
        gm = torch.stack([flat[:, c] @ fn[:, c].T for c in chunks]).contiguous()
    gs = torch.stack([flat[:, c].square().sum(-1) for c in chunks]).contiguous()
    scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(m3, device="cuda") * 0.1
    if special:
        gm[0, 0, 0] = NAN
        gm[1, 1, 9] = INF  # a comb logit: that token's comb is NaN
        gm[2, 2, 1] = -INF  # a pre logit: its pre is eps
        gs[:, 3] = 0.0
        gm[:, 4] = 0.0
        gs[5, 5] = INF
        residual[6, 1, :3] = torch.tensor([INF, -INF, NAN], device="cuda").bfloat16()
        residual[7, :, :8] = -0.0
    return gm, gs, scale, base, residual


class _no_tf32:
    def __enter__(self):
        self.saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.saved


def _fused(gm, gs, scale, base, residual, rms_eps, pre_eps, sk_eps, post_mult, repeat, s):
    n, m, h = residual.shape
    post, comb, li = _poisoned((n, m)), _poisoned((n, m * m)), _poisoned((n, h), torch.bfloat16)
    assert kernelkiln.mhc.mhc_pre_big_fuse_fwd(gm, gs, scale, base, residual, post, comb, li, rms_eps, pre_eps,
                                               sk_eps, post_mult, repeat, s) is None
    return post, comb, li


CHAIN = ("mhc_reduce_partials_and_rmsnorm_fwd", "mhc_pre_split_mixes_fwd", "mhc_sinkhorn_fwd", "mhc_pre_apply_mix_fwd")


def _unfused(gm, gs, scale, base, residual, rms_eps, pre_eps, sk_eps, post_mult, repeat, s):
    """The chain of this package's kernels (peer signatures): reduce/rmsnorm with one group of m·H, split mixes,
    Sinkhorn, apply-mix."""
    missing = [name for name in CHAIN if not hasattr(kernelkiln.mhc, name)]
    if missing:
        pytest.fail(f"the unfused chain needs kernelkiln.mhc.{', '.join(missing)}")
    n, m, h = residual.shape
    m3 = m * (m + 2)
    out_mul, sqrsum, mixes = _poisoned((n, 1, m3)), _poisoned((n, 1)), _poisoned((n, m3))
    kernelkiln.mhc.mhc_reduce_partials_and_rmsnorm_fwd(gm.view(s, n, 1, m3), gs.view(s, n, 1), out_mul, sqrsum,
                                                       mixes, m * h, rms_eps, s)
    pre, post, comb = _poisoned((n, m)), _poisoned((n, m)), _poisoned((n, m * m))
    kernelkiln.mhc.mhc_pre_split_mixes_fwd(mixes, scale, base, pre, post, comb, post_mult, pre_eps)
    comb_out = _poisoned((n, m, m))
    kernelkiln.mhc.mhc_sinkhorn_fwd(comb.view(n, m, m), comb_out, repeat, sk_eps)
    li = _poisoned((n, h), torch.bfloat16)
    kernelkiln.mhc.mhc_pre_apply_mix_fwd(residual, pre, li)
    return post, comb_out.view(n, m * m), li


def _opcheck_fuse():
    gm, gs, scale, base, residual = _fuse_inputs(33, 256)
    n, h = 33, 256
    return (gm, gs, scale, base, residual, torch.empty(n, M, device="cuda"), torch.empty(n, M * M, device="cuda"),
            torch.empty(n, h, device="cuda", dtype=torch.bfloat16), 1e-6, 1e-6, 1e-6, 2.0, 20, 16), {}


OPCHECK_CASES = {"mhc_sinkhorn_fwd": _opcheck_fwd, "mhc_sinkhorn_bwd": _opcheck_bwd,
                 "mhc_pre_big_fuse_fwd": _opcheck_fuse}


@pytest.mark.parametrize("n1", [512, 1024, 2048, 8192])
@pytest.mark.parametrize("h", [1280, 2560, 4096])
def test_big_fuse_equals_unfused_chain(seed, n1, h):
    _need(MHC_PRE_BIG_FUSE_FWD)
    gm, gs, scale, base, residual = _fuse_inputs(n1, h)
    args = (gm, gs, scale, base, residual, 1e-6, 1e-6, 1e-6, 1.0, 10, 16)
    got = _fused(*args)
    for name, a, b in zip(("post_mix", "comb_mix", "layer_input"), got, mhc_pre_big_fuse_fwd_ref(*args)):
        assert_bitwise(a, b, f"mhc_pre_big_fuse_fwd {name}")
    for name, a, b in zip(("post_mix", "comb_mix", "layer_input"), got, _unfused(*args)):
        assert torch.equal(a, b), f"mhc_pre_big_fuse_fwd {name} differs from the unfused chain"


@pytest.mark.parametrize("n, h, s, repeat, post_mult", [
    (1, 8, 1, 1, 2.0), (7, 7168, 16, 20, 2.0), (300, 4096, 1, 20, 2.0), (129, 2056, 3, 25, 1.5),
    (64, 128, 32, 10, 1.0)])
def test_big_fuse_model_values_and_odd_shapes(seed, n, h, s, repeat, post_mult):
    """DeepSeek-V4's repeat 20 and post_mult 2.0, H 7168, H not a multiple of the 1024 elements one pass takes,
    a single split, more splits than 16."""
    _need(MHC_PRE_BIG_FUSE_FWD)
    gm, gs, scale, base, residual = _fuse_inputs(n, h, s)
    args = (gm, gs, scale, base, residual, 1e-6, 1e-6, 1e-6, post_mult, repeat, s)
    got = _fused(*args)
    for name, a, b in zip(("post_mix", "comb_mix", "layer_input"), got, mhc_pre_big_fuse_fwd_ref(*args)):
        assert_bitwise(a, b, f"mhc_pre_big_fuse_fwd {name}")
    for name, a, b in zip(("post_mix", "comb_mix", "layer_input"), got, _unfused(*args)):
        assert torch.equal(a, b), f"mhc_pre_big_fuse_fwd {name} differs from the unfused chain"


def test_big_fuse_special_values(seed):
    _need(MHC_PRE_BIG_FUSE_FWD)
    gm, gs, scale, base, residual = _fuse_inputs(64, 1280, special=True)
    args = (gm, gs, scale, base, residual, 1e-6, 1e-6, 1e-6, 2.0, 20, 16)
    got = _fused(*args)
    for name, a, b in zip(("post_mix", "comb_mix", "layer_input"), got, mhc_pre_big_fuse_fwd_ref(*args)):
        _assert_same_nan(a, b, f"{name} vs the reference")
    for name, a, b in zip(("post_mix", "comb_mix", "layer_input"), got, _unfused(*args)):
        _assert_same_nan(a, b, f"{name} vs the unfused chain")


def test_big_fuse_vs_peer_reference(seed):
    """Against the peer's formulas (its torch references' semantics, fp64): the peer's tolerance."""
    _need(MHC_PRE_BIG_FUSE_FWD)
    n, h = 2048, 2560
    gm, gs, scale, base, residual = _fuse_inputs(n, h)
    post, comb, li = _fused(gm, gs, scale, base, residual, 1e-6, 1e-6, 1e-6, 2.0, 20, 16)
    mixes = gm.double().sum(0) * torch.rsqrt(gs.double().sum(0) / (M * h) + 1e-6).unsqueeze(-1)
    group = torch.clamp(torch.arange(M * (M + 2), device="cuda") // M, max=2)
    z = mixes * scale.double()[group] + base.double()
    pre = torch.sigmoid(z[:, :M]) + 1e-6
    torch.testing.assert_close(post.double(), torch.sigmoid(z[:, M:2 * M]) * 2.0)
    want_comb = sinkhorn_normalize_ref(z[:, 2 * M:].view(n, M, M), 20, 1e-6).view(n, M * M)
    torch.testing.assert_close(comb.double(), want_comb, rtol=1e-4, atol=1e-6)
    want_li = (residual.double() * pre.unsqueeze(-1)).sum(1)
    assert calc_diff(li, want_li) < 1e-5


def test_big_fuse_empty():
    _need(MHC_PRE_BIG_FUSE_FWD)
    gm, gs = torch.empty(16, 0, 24, device="cuda"), torch.empty(16, 0, device="cuda")
    residual = torch.empty(0, M, 256, device="cuda", dtype=torch.bfloat16)
    assert kernelkiln.mhc.mhc_pre_big_fuse_fwd(
        gm, gs, torch.zeros(3, device="cuda"), torch.zeros(24, device="cuda"), residual,
        torch.empty(0, M, device="cuda"), torch.empty(0, M * M, device="cuda"),
        torch.empty(0, 256, device="cuda", dtype=torch.bfloat16), 1e-6, 1e-6, 1e-6, 2.0, 20) is None


def test_big_fuse_misaligned_residual_is_refused():
    _need(MHC_PRE_BIG_FUSE_FWD)
    gm, gs, scale, base, residual = _fuse_inputs(4, 64)
    shifted = torch.empty(4 * M * 64 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(4, M, 64)
    with pytest.raises(ValueError, match="residual must start at a 16-byte aligned address"):
        _fused(gm, gs, scale, base, shifted, 1e-6, 1e-6, 1e-6, 2.0, 20, 16)
