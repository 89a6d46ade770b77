"""The mHC mix ops on the GPU: bit-identical to the ordered references run on the GPU (kernelkiln.torch.mhc_mixes
``*_fwd_ref`` / ``*_bwd_ref``: torch's CUDA exp and rsqrt are the kernels' expf and rsqrtf), within tolerance of the
peer's torch forms (autograd through them for the backwards), on the peer's test shapes (norm_fn n1 {4096, 8192} x
h {1280, 2560, 7168}, split-K n1 {13, 48, 512}, m 4), with special values, n = 0, deterministic run to run, and
the split-mixes gradients following the SM count they were given. Outputs are poisoned (NaN) before each call."""
import pytest
import torch

from bitwise import assert_bitwise
from kernelkiln import config
from kernelkiln._ops.launch import has_variant
from kernelkiln.mhc import (mhc_fn_normw_merge_bwd, mhc_fn_normw_merge_fwd, mhc_head_compute_mix_bwd,
                            mhc_head_compute_mix_fwd, mhc_pre_split_mixes_bwd, mhc_pre_split_mixes_fwd,
                            mhc_reduce_partials_and_rmsnorm_bwd, mhc_reduce_partials_and_rmsnorm_fwd)
from kernelkiln.torch.mhc_mixes import (mhc_fn_normw_merge_bwd_ref, mhc_head_compute_mix_bwd_ref,
                                        mhc_head_compute_mix_fwd_ref, mhc_head_compute_mix_ref,
                                        mhc_pre_norm_fn_partials_ref, mhc_pre_norm_fn_ref, mhc_pre_split_mixes_bwd_ref,
                                        mhc_pre_split_mixes_fwd_ref, mhc_pre_split_mixes_ref,
                                        mhc_reduce_partials_and_rmsnorm_bwd_ref,
                                        mhc_reduce_partials_and_rmsnorm_fwd_ref)
from kernelkiln_contract.mhc_mixes import (MHC_HEAD_COMPUTE_MIX_BWD, MHC_HEAD_COMPUTE_MIX_FWD,
                                           MHC_PRE_SPLIT_MIXES_BWD, MHC_PRE_SPLIT_MIXES_FWD)

pytestmark = pytest.mark.gpu
NAN, INF = float("nan"), float("inf")
TOKENS = [0, 1, 127, 512, 8001]
PRE_EPS, POST_MULT, RMS_EPS = 1e-6, 2.0, 1e-6


def _calc_diff(x, y):
    """The peer's measure: Σ(x - y)² / Σ(x² + y²) in float64 (0 when both are zero)."""
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return ((x - y) ** 2).sum().item() / den.item() if den else 0.0


def _bits(actual, expected, what):
    """Bit for bit, except that NaNs only need to be NaN in the same places (the GPU's arithmetic returns its
    canonical NaN whatever the input's payload)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    nan_a, nan_e = actual.isnan(), expected.isnan()
    assert torch.equal(nan_a, nan_e), f"{what}: NaN positions differ"
    assert_bitwise(actual[~nan_a], expected[~nan_e], what)


def _poisoned(*shape):
    return torch.full(shape, NAN, device="cuda")


def _skip_missing(contract, m):
    if not has_variant(contract, contract.key(mhc_mult=m), 0):
        pytest.skip(f"{contract.op} for mhc_mult={m} is not in this build's manifest")


def _poke(t, values):
    """Special values at fixed places of a flat view (in place)."""
    flat = t.view(-1)
    for i, v in enumerate(values):
        if flat.numel():
            flat[(i * 7919) % flat.numel()] = v
    return t


# ------------------------------------------------------------------------------------------------ opcheck cases
def _opcheck_head_fwd():
    x = torch.randn(300, 4, device="cuda")
    return (x, torch.randn(1, device="cuda"), torch.randn(4, device="cuda"), torch.empty_like(x), PRE_EPS, 0), {}


def _opcheck_head_bwd():
    x = torch.randn(300, 4, device="cuda")
    p = config.get_num_sms()
    return (torch.randn_like(x), x, torch.randn(1, device="cuda"), torch.randn(4, device="cuda"), torch.empty_like(x),
            torch.empty(p, 1, device="cuda"), torch.empty(p, 4, device="cuda"), p, 0), {}


def _opcheck_split_fwd():
    n = 300
    return (torch.randn(n, 24, device="cuda"), torch.randn(3, device="cuda"), torch.randn(24, device="cuda"),
            torch.empty(n, 4, device="cuda"), torch.empty(n, 4, device="cuda"), torch.empty(n, 16, device="cuda"),
            POST_MULT, PRE_EPS), {}


def _opcheck_split_bwd():
    n = 300
    return (torch.randn(n, 4, device="cuda"), torch.randn(n, 4, device="cuda"), torch.randn(n, 16, device="cuda"),
            torch.randn(n, 24, device="cuda"), torch.rand(n, 4, device="cuda"), torch.randn(3, device="cuda"),
            torch.randn(24, device="cuda"), torch.empty(n, 24, device="cuda"), torch.empty(3, device="cuda"),
            torch.empty(24, device="cuda"), POST_MULT), {}


def _opcheck_merge_fwd():
    fn = torch.randn(24, 1024, device="cuda")
    return (fn, torch.randn(1024, device="cuda"), torch.empty_like(fn)), {}


def _opcheck_merge_bwd():
    fn = torch.randn(24, 1024, device="cuda")
    return (fn, torch.randn(1024, device="cuda"), torch.randn_like(fn), torch.randn_like(fn),
            torch.randn(1024, device="cuda")), {}


def _opcheck_reduce_fwd():
    s, n = 4, 100
    return (torch.randn(s, n, 1, 24, device="cuda"), torch.rand(s, n, 1, device="cuda"),
            torch.empty(n, 1, 24, device="cuda"), torch.empty(n, 1, device="cuda"), torch.empty(n, 24, device="cuda"),
            4 * 256, RMS_EPS, s), {}


def _opcheck_reduce_bwd():
    n = 100
    return (torch.randn(n, 24, device="cuda"), torch.randn(n, 1, 24, device="cuda"), torch.rand(n, 1, device="cuda"),
            torch.empty(n, 1, 24, device="cuda"), torch.empty(n, 1, device="cuda"), 4 * 256, RMS_EPS), {}


OPCHECK_CASES = {
    "mhc_head_compute_mix_fwd": _opcheck_head_fwd, "mhc_head_compute_mix_bwd": _opcheck_head_bwd,
    "mhc_pre_split_mixes_fwd": _opcheck_split_fwd, "mhc_pre_split_mixes_bwd": _opcheck_split_bwd,
    "mhc_fn_normw_merge_fwd": _opcheck_merge_fwd, "mhc_fn_normw_merge_bwd": _opcheck_merge_bwd,
    "mhc_reduce_partials_and_rmsnorm_fwd": _opcheck_reduce_fwd,
    "mhc_reduce_partials_and_rmsnorm_bwd": _opcheck_reduce_bwd,
}


# ------------------------------------------------------------------------------------------------ head mix
@pytest.mark.parametrize("n", TOKENS)
@pytest.mark.parametrize("m", [2, 4, 8])
def test_head_mix_fwd_bitwise(seed, n, m):
    _skip_missing(MHC_HEAD_COMPUTE_MIX_FWD, m)
    x = torch.randn(n, m, device="cuda") * 3
    scale, base = torch.randn(1, device="cuda"), torch.randn(m, device="cuda")
    out = _poisoned(n, m)
    assert mhc_head_compute_mix_fwd(x, scale, base, out, PRE_EPS) is None
    _bits(out, mhc_head_compute_mix_fwd_ref(x, scale, base, PRE_EPS), "output_mix")
    if n:
        assert _calc_diff(out, mhc_head_compute_mix_ref(x, scale, base, PRE_EPS)) < 1e-12


def test_head_mix_fwd_special_values(seed):
    x = _poke(torch.randn(1000, 4, device="cuda"), [NAN, INF, -INF, 0.0, -0.0, 1e38, -1e38, 1e-42])
    scale, base = torch.randn(1, device="cuda"), torch.randn(4, device="cuda")
    out = _poisoned(1000, 4)
    mhc_head_compute_mix_fwd(x, scale, base, out, PRE_EPS, token_block_size=64)
    _bits(out, mhc_head_compute_mix_fwd_ref(x, scale, base, PRE_EPS), "output_mix (special values)")


@pytest.mark.parametrize("n", [0, 1, 512, 8001, 16384])
@pytest.mark.parametrize("m", [2, 4, 8])
@pytest.mark.parametrize("sms_offset", [0, -19, None])
def test_head_mix_bwd_bitwise(seed, n, m, sms_offset):
    _skip_missing(MHC_HEAD_COMPUTE_MIX_BWD, m)
    p = 1 if sms_offset is None else config.get_num_sms() + sms_offset
    x, go = torch.randn(n, m, device="cuda"), torch.randn(n, m, device="cuda")
    scale, base = torch.randn(1, device="cuda"), torch.randn(m, device="cuda")
    gi, sp, bp = _poisoned(n, m), _poisoned(p, 1), _poisoned(p, m)
    assert mhc_head_compute_mix_bwd(go, x, scale, base, gi, sp, bp, p) is None
    want = mhc_head_compute_mix_bwd_ref(go, x, scale, base, p)
    for got, exp, what in zip((gi, sp, bp), want, ("input_mix_grad", "scale partial", "base partial")):
        _bits(got, exp, what)
    # against autograd through the peer's form, in float64
    xd, sd, bd = (t.double().requires_grad_() for t in (x, scale, base))
    mhc_head_compute_mix_ref(xd, sd, bd, PRE_EPS).backward(go.double())
    if n:
        assert _calc_diff(gi, xd.grad) < 1e-10
        assert _calc_diff(sp.sum(0), sd.grad) < 1e-9 and _calc_diff(bp.sum(0), bd.grad) < 1e-9
    else:
        assert (sp == 0).all() and (bp == 0).all()


def test_head_mix_bwd_deterministic(seed):
    n, m, p = 50000, 4, config.get_num_sms()
    x, go = torch.randn(n, m, device="cuda"), torch.randn(n, m, device="cuda")
    scale, base = torch.randn(1, device="cuda"), torch.randn(m, device="cuda")
    runs = []
    for _ in range(2):
        outs = (_poisoned(n, m), _poisoned(p, 1), _poisoned(p, m))
        mhc_head_compute_mix_bwd(go, x, scale, base, *outs, p)
        runs.append(outs)
    for a, b in zip(*runs):
        assert_bitwise(a, b, "run to run")


# ------------------------------------------------------------------------------------------------ split mixes
@pytest.mark.parametrize("n", TOKENS + [16384])
@pytest.mark.parametrize("m", [2, 4, 8])
def test_split_mixes_fwd_bitwise(seed, n, m):
    _skip_missing(MHC_PRE_SPLIT_MIXES_FWD, m)
    m3 = m * (m + 2)
    x = torch.randn(n, m3, device="cuda") * 2
    scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(m3, device="cuda") * 0.1
    pre, post, comb = _poisoned(n, m), _poisoned(n, m), _poisoned(n, m * m)
    assert mhc_pre_split_mixes_fwd(x, scale, base, pre, post, comb, POST_MULT, PRE_EPS) is None
    for got, exp, what in zip((pre, post, comb), mhc_pre_split_mixes_fwd_ref(x, scale, base, m, POST_MULT, PRE_EPS),
                              ("pre", "post", "comb")):
        _bits(got, exp, what)
    if n:
        wp, wq, wc = mhc_pre_split_mixes_ref(x.unsqueeze(0), scale, base, m, POST_MULT, PRE_EPS)
        assert _calc_diff(pre, wp.view(n, m)) < 1e-12 and _calc_diff(post, wq.view(n, m)) < 1e-12
        assert _calc_diff(comb, wc.view(n, m * m)) < 1e-12


def test_split_mixes_fwd_special_values(seed):
    n = 777
    x = _poke(torch.randn(n, 24, device="cuda"), [NAN, INF, -INF, 0.0, -0.0, 1e38, -1e38, 3e-42] * 3)
    scale = torch.tensor([1.0, INF, 0.5], device="cuda")
    base = torch.randn(24, device="cuda")
    pre, post, comb = _poisoned(n, 4), _poisoned(n, 4), _poisoned(n, 16)
    mhc_pre_split_mixes_fwd(x, scale, base, pre, post, comb, POST_MULT, PRE_EPS)
    for got, exp, what in zip((pre, post, comb), mhc_pre_split_mixes_fwd_ref(x, scale, base, 4, POST_MULT, PRE_EPS),
                              ("pre", "post", "comb")):
        _bits(got, exp, what + " (special values)")


def _split_bwd_inputs(n, m):
    m3 = m * (m + 2)
    x = torch.randn(n, m3, device="cuda")
    scale, base = torch.randn(3, device="cuda") * 0.5, torch.randn(m3, device="cuda") * 0.5
    _, post, _ = mhc_pre_split_mixes_fwd_ref(x, scale, base, m, POST_MULT, PRE_EPS)
    grads = torch.randn(n, m, device="cuda"), torch.randn(n, m, device="cuda"), torch.randn(n, m * m, device="cuda")
    return grads, x, post, scale, base


@pytest.mark.parametrize("n", [0, 1, 512, 8001, 16384])
@pytest.mark.parametrize("m", [2, 4])
def test_split_mixes_bwd_bitwise(seed, n, m):
    _skip_missing(MHC_PRE_SPLIT_MIXES_BWD, m)
    m3 = m * (m + 2)
    (gp, gq, gc), x, post, scale, base = _split_bwd_inputs(n, m)
    gi, sg, bg = _poisoned(n, m3), _poisoned(3), _poisoned(m3)
    assert mhc_pre_split_mixes_bwd(gp, gq, gc, x, post, scale, base, gi, sg, bg, POST_MULT) is None
    want = mhc_pre_split_mixes_bwd_ref(gp, gq, gc, x, post, scale, base, POST_MULT, config.get_num_sms())
    for got, exp, what in zip((gi, sg, bg), want, ("input_mixes_grad", "mhc_scale_grad", "mhc_base_grad")):
        _bits(got, exp, what)
    xd, sd, bd = (t.double().requires_grad_() for t in (x, scale, base))
    outs = mhc_pre_split_mixes_ref(xd.unsqueeze(0), sd, bd, m, POST_MULT, PRE_EPS)
    torch.autograd.backward(outs, [gp.double().view_as(outs[0]), gq.double().view_as(outs[1]),
                                   gc.double().view_as(outs[2])])
    if n:
        assert _calc_diff(gi, xd.grad) < 1e-10
        assert _calc_diff(sg, sd.grad) < 1e-9 and _calc_diff(bg, bd.grad) < 1e-9
    else:
        assert (sg == 0).all() and (bg == 0).all()


@pytest.mark.parametrize("sms_offset", [-19, -131])
def test_split_mixes_bwd_follows_num_sms(seed, sms_offset):
    """The partial count is config.get_num_sms() at the call: a smaller one gives the reference's bits for it."""
    full = config.get_device_num_sms()
    p = max(1, full + sms_offset)
    (gp, gq, gc), x, post, scale, base = _split_bwd_inputs(8001, 4)
    gi, sg, bg = _poisoned(8001, 24), _poisoned(3), _poisoned(24)
    before = config.get_num_sms()
    config.set_num_sms(p)
    try:
        mhc_pre_split_mixes_bwd(gp, gq, gc, x, post, scale, base, gi, sg, bg, POST_MULT)
    finally:
        config.set_num_sms(before)
    want = mhc_pre_split_mixes_bwd_ref(gp, gq, gc, x, post, scale, base, POST_MULT, p)
    for got, exp, what in zip((gi, sg, bg), want, ("input_mixes_grad", "mhc_scale_grad", "mhc_base_grad")):
        _bits(got, exp, what)


def test_split_mixes_bwd_special_values(seed):
    (gp, gq, gc), x, post, scale, base = _split_bwd_inputs(3000, 4)
    _poke(gp, [NAN, INF])
    _poke(gc, [-INF, 0.0, -0.0, 1e38])
    _poke(x, [0.0, 1e30, -1e30])
    gi, sg, bg = _poisoned(3000, 24), _poisoned(3), _poisoned(24)
    mhc_pre_split_mixes_bwd(gp, gq, gc, x, post, scale, base, gi, sg, bg, POST_MULT)
    want = mhc_pre_split_mixes_bwd_ref(gp, gq, gc, x, post, scale, base, POST_MULT, config.get_num_sms())
    for got, exp, what in zip((gi, sg, bg), want, ("input_mixes_grad", "mhc_scale_grad", "mhc_base_grad")):
        _bits(got, exp, what + " (special values)")


# ------------------------------------------------------------------------------------------------ fn / normw merge
@pytest.mark.parametrize("h", [1280, 2560, 4096, 7168])
@pytest.mark.parametrize("rows", [4, 24])
def test_fn_normw_merge_bitwise(seed, h, rows):
    fn, w = torch.randn(rows, 4 * h, device="cuda") * 1e-4, torch.rand(4 * h, device="cuda") + 0.5
    _poke(fn, [NAN, INF, -0.0])
    out = _poisoned(rows, 4 * h)
    assert mhc_fn_normw_merge_fwd(fn, w, out) is None
    _bits(out, fn * w, "out_fn")
    go = torch.randn(rows, 4 * h, device="cuda")
    fg, wg = torch.randn(rows, 4 * h, device="cuda"), torch.randn(4 * h, device="cuda")
    want_f, want_w = fg.clone(), wg.clone()
    mhc_fn_normw_merge_bwd_ref(fn, w, go, want_f, want_w)
    assert mhc_fn_normw_merge_bwd(fn, w, go, fg, wg) is None
    _bits(fg, want_f, "fn_grad")
    _bits(wg, want_w, "normw_grad")


def test_fn_normw_merge_empty():
    fn = torch.empty(0, 1024, device="cuda")
    w = torch.randn(1024, device="cuda")
    mhc_fn_normw_merge_fwd(fn, w, torch.empty_like(fn))
    wg = torch.full((1024,), -0.0, device="cuda")
    mhc_fn_normw_merge_bwd(fn, w, fn, fn.clone(), wg)
    assert (wg == 0).all() and not torch.signbit(wg).any()  # -0 + (+0) = +0, as the peer's kernel adds its zero sum


# ------------------------------------------------------------------------------------------------ reduce + rmsnorm
def _partials(n, h, s, m=4):
    residual = (torch.randn(1, n, m, h, device="cuda") * (1 + 0.01 * torch.arange(m, device="cuda")).view(
        1, 1, m, 1)).bfloat16()
    fn = torch.randn(m * (m + 2), m * h, device="cuda") * 1e-4
    om, sq = mhc_pre_norm_fn_partials_ref(residual, fn, s)
    return residual, fn, om, sq


@pytest.mark.parametrize("n, h", [(4096, 1280), (4096, 2560), (4096, 7168), (8192, 1280), (8192, 2560),
                                  (8192, 7168), (13, 1280), (48, 4096), (512, 7168), (0, 2560)])
def test_reduce_rmsnorm_fwd_bitwise(seed, n, h):
    s, m3 = 16, 24
    residual, fn, oms, sqs = _partials(n, h, s)
    om, sq, out = _poisoned(n, 1, m3), _poisoned(n, 1), _poisoned(n, m3)
    assert mhc_reduce_partials_and_rmsnorm_fwd(oms, sqs, om, sq, out, 4 * h, RMS_EPS, s) is None
    for got, exp, what in zip((om, sq, out), mhc_reduce_partials_and_rmsnorm_fwd_ref(oms, sqs, 4 * h, RMS_EPS),
                              ("out_mul", "sqrsum", "out")):
        _bits(got, exp, what)
    if n:
        assert _calc_diff(out, mhc_pre_norm_fn_ref(residual, fn, None, RMS_EPS).view(n, m3)) < 1e-8


@pytest.mark.parametrize("groups, m3, s", [(2, 24, 3), (4, 8, 1), (3, 80, 5)])
def test_reduce_rmsnorm_groups_bitwise(seed, groups, m3, s):
    n = 1000
    oms = torch.randn(s, n, groups, m3, device="cuda")
    sqs = torch.rand(s, n, groups, device="cuda") * 100
    _poke(oms, [NAN, INF, -0.0])
    _poke(sqs, [0.0, INF])
    om, sq, out = _poisoned(n, groups, m3), _poisoned(n, groups), _poisoned(n, m3)
    mhc_reduce_partials_and_rmsnorm_fwd(oms, sqs, om, sq, out, 640, RMS_EPS, s)
    for got, exp, what in zip((om, sq, out), mhc_reduce_partials_and_rmsnorm_fwd_ref(oms, sqs, 640, RMS_EPS),
                              ("out_mul", "sqrsum", "out")):
        _bits(got, exp, what)
    og = torch.randn(n, m3, device="cuda")
    omg, sqg = _poisoned(n, groups, m3), _poisoned(n, groups)
    mhc_reduce_partials_and_rmsnorm_bwd(og, om, sq, omg, sqg, 640, RMS_EPS)
    for got, exp, what in zip((omg, sqg), mhc_reduce_partials_and_rmsnorm_bwd_ref(og, om, sq, 640, RMS_EPS),
                              ("out_mul_grad", "sqrsum_grad")):
        _bits(got, exp, what)


@pytest.mark.parametrize("n, h", [(4096, 1280), (8192, 2560), (8192, 7168), (13, 1280), (0, 2560)])
def test_reduce_rmsnorm_bwd_bitwise(seed, n, h):
    m3, gs = 24, 4 * h
    om = torch.randn(n, 1, m3, device="cuda")
    sq = torch.rand(n, 1, device="cuda") * gs
    og = torch.randn(n, m3, device="cuda")
    omg, sqg = _poisoned(n, 1, m3), _poisoned(n, 1)
    assert mhc_reduce_partials_and_rmsnorm_bwd(og, om, sq, omg, sqg, gs, RMS_EPS) is None
    for got, exp, what in zip((omg, sqg), mhc_reduce_partials_and_rmsnorm_bwd_ref(og, om, sq, gs, RMS_EPS),
                              ("out_mul_grad", "sqrsum_grad")):
        _bits(got, exp, what)
    omd, sqd = om.double().requires_grad_(), sq.double().requires_grad_()
    (omd * (sqd / gs + RMS_EPS).rsqrt().unsqueeze(-1)).sum(1).backward(og.double())
    if n:
        assert _calc_diff(omg, omd.grad) < 1e-10 and _calc_diff(sqg, sqd.grad) < 1e-8
