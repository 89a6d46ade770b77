"""engram_gate_fwd / engram_gate_bwd on the GPU: bit-identical to the ordered references run on the GPU
(kernelkiln.torch.engram_gate_fwd_ref / engram_gate_bwd_ref), within the peer's tolerance of its torch reference
(autograd through engram_gate_ref for the backward), save / no-save / in-place outputs identical, image tokens,
T = 0, non-finite inputs, results independent of the forward's persistent-block count."""
import pytest
import torch

from bitwise import assert_bitwise
from kernelkiln import config
from kernelkiln.engram import engram_gate_bwd, engram_gate_fwd
from kernelkiln.torch.engram_gate import engram_gate_bwd_ref, engram_gate_fwd_ref, engram_gate_ref

pytestmark = pytest.mark.gpu
HC = 4
EPS, CLAMP = 1e-20, 1e-6


def _calc_diff(x, y):
    """The peer's measure: Σ(x - y)² / Σ(x² + y²) in float64 (0 when both are zero)."""
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return ((x - y) ** 2).sum().item() / den.item() if den else 0.0


def _inputs(t, h, mask_frac=0.0):
    x = torch.randn(t, HC, h, device="cuda").bfloat16()
    kv = torch.randn(t, HC + 1, h, device="cuda").bfloat16()
    wh = torch.randn(HC, h, device="cuda").bfloat16()
    we = torch.randn(HC, h, device="cuda").bfloat16()
    mask = (torch.rand(t, device="cuda") < mask_frac) if mask_frac else None
    return x, kv, wh, we, mask


def _poison_allocator():
    """Fill freed cached memory with NaN bytes (0xFF), so a store the kernel misses shows in its fresh outputs."""
    junk = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    junk.fill_(0xFF)
    del junk


def _fused(wh, we):
    return wh.float() * we.float()


def _assert_same_nan_aware(actual, expected, what):
    """Bitwise, except that any NaN matches any NaN (payloads differ between torch's and the kernel's rounding)."""
    a, e = actual.float(), expected.float()
    assert torch.equal(a.isnan(), e.isnan()), f"{what}: NaN positions differ"
    keep = ~a.isnan()
    assert_bitwise(actual[keep], expected[keep], what)


def _opcheck_fwd():
    # no mask: the saved rows of image tokens are left unwritten, which opcheck would compare
    x, kv, wh, we, _ = _inputs(33, 512)
    return (x, kv, _fused(wh, we), EPS, CLAMP, True, None), {}


def _opcheck_fwd_inplace():
    x, kv, wh, we, mask = _inputs(17, 768, 0.3)
    return (x, kv, _fused(wh, we), EPS, CLAMP, mask), {}


def _opcheck_bwd():
    x, kv, wh, we, mask = _inputs(33, 512, 0.2)
    wf = _fused(wh, we)
    _, dot, g, rx, rk = engram_gate_fwd(x, kv, wf, EPS, CLAMP, image_token_mask=mask)
    m = mask.view(-1, 1)
    dot, g, rx, rk = (torch.where(m, torch.ones_like(s), s) for s in (dot, g, rx, rk))  # defined masked rows
    go = torch.randn_like(x)
    return (go, x, kv, wf, dot, g, rx, rk, CLAMP, mask), {}


OPCHECK_CASES = {"engram_gate_fwd": _opcheck_fwd, "engram_gate_fwd_inplace": _opcheck_fwd_inplace,
                 "engram_gate_bwd": _opcheck_bwd}

SHAPES = [(4001, 2048), (8001, 4096), (1000, 2560), (513, 7168), (300, 8192), (77, 512), (5, 768), (1, 1280)]


@pytest.mark.parametrize("t,h", SHAPES)
def test_fwd_bitwise_and_tolerance(t, h, seed):
    x, kv, wh, we, _ = _inputs(t, h)
    wf = _fused(wh, we)
    _poison_allocator()
    got = engram_gate_fwd(x, kv, wf, EPS, CLAMP)
    want = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    for a, b, n in zip(got, want, ("output", "dot", "gate_score", "rstd_x", "rstd_k")):
        assert_bitwise(a, b, n)
    if t >= 1000:  # the peer's bound is statistical (bf16 rounding flips of the output): its shapes only
        peer = engram_gate_ref(x, kv, wh, we, CLAMP, EPS, save_for_backward=True)
        for a, b, n in zip(got, peer, ("output", "dot", "gate_score", "rstd_x", "rstd_k")):
            assert _calc_diff(a, b) < 2e-10, n


@pytest.mark.parametrize("t,h", [(4001, 4096), (700, 2560)])
def test_fwd_save_nosave_inplace_identical(t, h, seed):
    x, kv, wh, we, mask = _inputs(t, h, 0.1)
    wf = _fused(wh, we)
    for m in (None, mask):
        out_save = engram_gate_fwd(x, kv, wf, EPS, CLAMP, True, m)[0]
        out_nosave, *rest = engram_gate_fwd(x, kv, wf, EPS, CLAMP, False, m)
        assert rest == [None] * 4
        xi = x.clone()
        out_in, *rest = engram_gate_fwd(xi, kv, wf, EPS, CLAMP, False, m, inplace=True)
        assert out_in is xi and rest == [None] * 4
        assert_bitwise(out_nosave, out_save, "no-save output")
        assert_bitwise(xi, out_save, "in-place output")


def test_fwd_image_tokens(seed):
    t, h = 2001, 4096
    x, kv, wh, we, mask = _inputs(t, h, 0.3)
    wf = _fused(wh, we)
    mask[0] = mask[-1] = True
    out, dot, g, rx, rk = engram_gate_fwd(x, kv, wf, EPS, CLAMP, image_token_mask=mask)
    ref = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP, image_token_mask=mask)
    assert_bitwise(out, ref[0], "output")
    assert_bitwise(out[mask], x[mask], "image rows pass through")
    keep = ~mask
    for a, b, n in zip((dot, g, rx, rk), ref[1:], ("dot", "gate_score", "rstd_x", "rstd_k")):
        assert_bitwise(a[keep], b[keep], n)
    # the text tokens are as without a mask
    plain = engram_gate_fwd(x, kv, wf, EPS, CLAMP)
    assert_bitwise(out[keep], plain[0][keep], "text rows")


def test_fwd_independent_of_blocks(seed, monkeypatch):
    import kernelkiln.engram._engram_gate_fwd as fwd_mod
    x, kv, wh, we, _ = _inputs(3001, 4096)
    wf = _fused(wh, we)
    base = engram_gate_fwd(x, kv, wf, EPS, CLAMP)
    for p in (1, 7, 5000):
        monkeypatch.setattr(fwd_mod, "gate_fwd_num_blocks", lambda num_sms, hc, p=p: p)
        other = engram_gate_fwd(x, kv, wf, EPS, CLAMP)
        for a, b in zip(other, base):
            assert_bitwise(a, b, f"P={p}")


def test_fwd_zero_tokens():
    x, kv, wh, we, _ = _inputs(0, 1024)
    out, dot, g, rx, rk = engram_gate_fwd(x, kv, _fused(wh, we), EPS, CLAMP)
    assert out.shape == (0, HC, 1024) and dot.shape == (0, HC)


def test_fwd_special_values(seed):
    t, h = 64, 1024
    x, kv, wh, we, _ = _inputs(t, h)
    x[0, 0, 5] = float("nan")
    x[1, 1] = 0  # sx = 0 and raw = 0: rstd = rsqrt(eps), d = 0 -> copysign gives +sqrt(clamp)
    kv[2, 2, 7] = float("inf")
    kv[3, HC, 9] = float("-inf")
    x[4, 3, 11] = float("inf")
    wf = _fused(wh, we)
    got = engram_gate_fwd(x, kv, wf, EPS, CLAMP)
    want = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    for a, b, n in zip(got, want, ("output", "dot", "gate_score", "rstd_x", "rstd_k")):
        _assert_same_nan_aware(a, b, n)
    assert got[0][0, 0].float().isnan().all()  # a NaN in x poisons its head's gate, so the whole row
    g_zero = torch.sigmoid(torch.tensor(CLAMP, dtype=torch.float32).sqrt())
    assert got[2][1, 1].item() == pytest.approx(g_zero.item(), rel=1e-6)


def _bwd_case(t, h, mask_frac=0.0):
    x, kv, wh, we, mask = _inputs(t, h, mask_frac)
    wf = _fused(wh, we)
    out, dot, g, rx, rk = engram_gate_fwd(x, kv, wf, EPS, CLAMP, image_token_mask=mask)
    go = torch.randn_like(x)
    return x, kv, wh, we, wf, mask, dot, g, rx, rk, go


@pytest.mark.parametrize("t,h", SHAPES)
def test_bwd_bitwise(t, h, seed):
    x, kv, wh, we, wf, mask, dot, g, rx, rk, go = _bwd_case(t, h)
    _poison_allocator()
    gx, gkv, part = engram_gate_bwd(go, x, kv, wf, dot, g, rx, rk, CLAMP)
    assert part.shape == (config.get_num_sms(), HC, h)
    rgx, rgkv, rpart = engram_gate_bwd_ref(go, x, kv, wf, dot, g, rx, rk, CLAMP, num_partials=part.shape[0])
    assert_bitwise(gx, rgx, "grad_x")
    assert_bitwise(gkv, rgkv, "grad_kv")
    assert_bitwise(part, rpart, "grad_w_partial")


@pytest.mark.parametrize("t,h", [(4001, 2048), (8001, 4096), (2001, 7168)])
def test_bwd_tolerance_vs_autograd(t, h, seed):
    x, kv, wh, we, _ = _inputs(t, h)
    xr, kvr = x.clone().requires_grad_(), kv.clone().requires_grad_()
    whf, wef = wh.float().requires_grad_(), we.float().requires_grad_()
    out, dot, g, rx, rk = engram_gate_ref(xr, kvr, whf, wef, CLAMP, EPS, save_for_backward=True)
    go = torch.randn_like(x)
    out.backward(go)
    gx, gkv, part = engram_gate_bwd(go, x, kv, _fused(wh, we), dot.detach(), g.detach(), rx.detach(), rk.detach(),
                                    CLAMP)
    s = part.sum(0)
    assert _calc_diff(gx, xr.grad) < 1e-8
    assert _calc_diff(gkv, kvr.grad) < 1e-8
    assert _calc_diff(s * we.float(), whf.grad) < 1e-8
    assert _calc_diff(s * wh.float(), wef.grad) < 1e-8


def test_bwd_image_tokens(seed):
    t, h = 1501, 4096
    x, kv, wh, we, wf, mask, dot, g, rx, rk, go = _bwd_case(t, h, 0.3)
    mask[0] = mask[-1] = True
    m = mask.view(-1, 1)
    dot, g, rx, rk = (torch.where(m, torch.full_like(s, float("nan")), s) for s in (dot, g, rx, rk))
    gx, gkv, part = engram_gate_bwd(go, x, kv, wf, dot, g, rx, rk, CLAMP, image_token_mask=mask)
    rgx, rgkv, rpart = engram_gate_bwd_ref(go, x, kv, wf, dot, g, rx, rk, CLAMP, mask, num_partials=part.shape[0])
    assert_bitwise(gx, rgx, "grad_x")
    assert_bitwise(gkv, rgkv, "grad_kv")
    assert_bitwise(part, rpart, "grad_w_partial")
    assert_bitwise(gx[mask], go[mask], "image grad_x")
    assert not gkv[mask].float().abs().sum().item()
    assert not part.isnan().any()  # the NaN saved rows of image tokens are never read


def test_bwd_zero_tokens_zero_partials():
    x, kv, wh, we, _ = _inputs(0, 1024)
    e = torch.empty(0, HC, device="cuda")
    gx, gkv, part = engram_gate_bwd(torch.empty_like(x), x, kv, _fused(wh, we), e, e, e, e, CLAMP)
    assert gx.shape == x.shape and gkv.shape == kv.shape
    assert part.shape == (config.get_num_sms(), HC, 1024)
    assert_bitwise(part, torch.zeros_like(part), "partials at T = 0")


def test_bwd_fewer_tokens_than_partials(seed):
    x, kv, wh, we, wf, mask, dot, g, rx, rk, go = _bwd_case(3, 9216)  # beyond the register groups too
    gx, gkv, part = engram_gate_bwd(go, x, kv, wf, dot, g, rx, rk, CLAMP)
    rgx, rgkv, rpart = engram_gate_bwd_ref(go, x, kv, wf, dot, g, rx, rk, CLAMP, num_partials=part.shape[0])
    assert_bitwise(gx, rgx, "grad_x")
    assert_bitwise(gkv, rgkv, "grad_kv")
    assert_bitwise(part, rpart, "grad_w_partial")
    assert not part[3:].abs().sum().item()


def test_bwd_special_values(seed):
    x, kv, wh, we, wf, mask, dot, g, rx, rk, go = _bwd_case(64, 1024)
    go[0, 0, 3] = float("nan")
    go[1, 1, 4] = float("inf")
    dot[2, 2] = 0.0  # clamped: dg = 0
    dot[3, 3] = -dot[3, 3]
    gx, gkv, part = engram_gate_bwd(go, x, kv, wf, dot, g, rx, rk, CLAMP)
    rgx, rgkv, rpart = engram_gate_bwd_ref(go, x, kv, wf, dot, g, rx, rk, CLAMP, num_partials=part.shape[0])
    _assert_same_nan_aware(gx, rgx, "grad_x")
    _assert_same_nan_aware(gkv, rgkv, "grad_kv")
    _assert_same_nan_aware(part, rpart, "grad_w_partial")
    assert_bitwise(gx[2, 2], go[2, 2], "clamped head: grad_x = grad_out")
