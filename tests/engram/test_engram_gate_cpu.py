"""engram_gate_fwd / engram_gate_bwd on the CPU: our peer-semantics reference is the peer's (its torch/engram.py,
loaded by path from its wheel), the ordered references (the kernels' evaluation order) agree with it within the
peer's own tolerances (calc_diff < 2e-10 forward, < 1e-8 backward against autograd), the orders themselves
(lane ownership, butterfly, token order of the partials) match a scalar re-derivation, and every argument error of
the public functions is raised, naming the argument, before the "needs CUDA" error."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkiln.engram import engram_gate_bwd, engram_gate_fwd
from kernelkiln.torch.engram_gate import engram_gate_bwd_ref, engram_gate_fwd_ref, engram_gate_ref
from kernelkiln.torch.fused import fma_f32

EPS, CLAMP = 1e-20, 1e-6


def _calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return ((x - y) ** 2).sum().item() / den.item() if den else 0.0


def _inputs(t, hc, h, seed, mask_frac=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, hc, h, generator=g).bfloat16()
    kv = torch.randn(t, hc + 1, h, generator=g).bfloat16()
    wh = torch.randn(hc, h, generator=g).bfloat16()
    we = torch.randn(hc, h, generator=g).bfloat16()
    mask = (torch.rand(t, generator=g) < mask_frac) if mask_frac else None
    return x, kv, wh, we, mask


@settings(max_examples=25, deadline=None)
@given(t=st.integers(0, 40), hc=st.sampled_from([1, 2, 4]), h=st.sampled_from([512, 768, 1280]),
       mask_frac=st.sampled_from([0.0, 0.3]), save=st.booleans(), seed=st.integers(0, 2**16))
def test_peer_semantics_reference_is_the_peers(peer_engram, t, hc, h, mask_frac, save, seed):
    x, kv, wh, we, mask = _inputs(t, hc, h, seed, mask_frac)
    want = peer_engram.engram_gate_ref(x, kv, wh, we, CLAMP, EPS, save, mask)
    got = engram_gate_ref(x, kv, wh, we, CLAMP, EPS, save, mask)
    want, got = (want, got) if save else ((want,), (got,))
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a.view(torch.int32),
                           b.view(torch.int16) if b.dtype == torch.bfloat16 else b.view(torch.int32))


@pytest.mark.parametrize("t,h", [(4001, 2048), (4001, 2560), (2001, 7168)])  # the peer's shapes: its bound is
# statistical (a few bf16 rounding flips of the output), so it is checked where the peer checks it
def test_ordered_fwd_within_peer_tolerance(peer_engram, t, h):
    x, kv, wh, we, mask = _inputs(t, 4, h, t + h, 0.1)
    want = peer_engram.engram_gate_ref(x, kv, wh, we, CLAMP, EPS, True, mask)
    got = engram_gate_fwd_ref(x, kv, wh.float() * we.float(), EPS, CLAMP, True, mask)
    keep = ~mask
    assert torch.equal(got[0][mask], x[mask])
    # The output's bound is statistical (bf16 rounding flips where g differs in its last bits): the peer's 2e-10
    # holds on the GPU (test_engram_gate_gpu); on the CPU torch's exp and rsqrt round differently from CUDA's,
    # which adds flips, so the output gets 5e-10 here and the fp32 tensors keep the peer's bound.
    for a, b, n in zip(got, want, ("output", "dot", "gate_score", "rstd_x", "rstd_k")):
        assert _calc_diff(a[keep], b[keep]) < (5e-10 if n == "output" else 2e-10), n
    assert got[1][mask].isnan().all()  # the kernel leaves image tokens' saved rows unwritten


@pytest.mark.parametrize("t,h,p", [(4001, 2048, 132), (300, 7168, 7), (64, 512, 100)])
def test_ordered_bwd_within_peer_tolerance(peer_engram, t, h, p):
    x, kv, wh, we, mask = _inputs(t, 4, h, t * h, 0.1)
    xr, kvr = x.clone().requires_grad_(), kv.clone().requires_grad_()
    whf, wef = wh.float().requires_grad_(), we.float().requires_grad_()
    out, dot, g, rx, rk = peer_engram.engram_gate_ref(xr, kvr, whf, wef, CLAMP, EPS, True, mask)
    go = torch.randn(x.shape, generator=torch.Generator().manual_seed(t)).bfloat16()
    out.backward(go)
    gx, gkv, part = engram_gate_bwd_ref(go, x, kv, wh.float() * we.float(), dot.detach(), g.detach(), rx.detach(),
                                        rk.detach(), CLAMP, mask, num_partials=p)
    assert part.shape == (p, 4, h)
    s = part.sum(0)
    assert _calc_diff(gx, xr.grad) < 1e-8
    assert _calc_diff(gkv, kvr.grad) < 1e-8
    assert _calc_diff(s * we.float(), whf.grad) < 1e-8
    assert _calc_diff(s * wh.float(), wef.grad) < 1e-8
    assert torch.equal(gx[mask], go[mask]) and not gkv[mask].float().abs().sum()


def _lane_sum_fwd(a, b, h):
    """Scalar re-derivation of one forward sum: lane l adds a[e]·b[e] for e = c·256 + 8l + j with one fma each,
    c-major; then the xor butterfly."""
    lanes = []
    for lane in range(32):
        acc = torch.zeros((), dtype=torch.float32)
        for c in range(h // 256):
            for j in range(8):
                e = c * 256 + 8 * lane + j
                acc = fma_f32(a[e], b[e], acc)
        lanes.append(acc)
    for off in (16, 8, 4, 2, 1):
        lanes = [lanes[i] + lanes[i ^ off] for i in range(32)]
    return lanes[0]


def test_fwd_order_is_the_lane_order():
    x, kv, wh, we, _ = _inputs(2, 1, 768, 5)
    wf = wh.float() * we.float()
    # magnitudes spread over many binades make any other order round differently
    x = (x.float() * torch.logspace(-6, 6, 768)).bfloat16()
    _, dot, _, rx, _ = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    xf, kf = x.float(), kv.float()
    for t in range(2):
        assert torch.equal(dot[t, 0], _lane_sum_fwd(xf[t, 0] * wf[0], kf[t, 0], 768))
        sx = _lane_sum_fwd(xf[t, 0], xf[t, 0], 768)
        assert torch.equal(rx[t, 0], torch.rsqrt(sx / torch.tensor(768.0) + torch.tensor(EPS, dtype=torch.float32)))
    other = (xf[0, 0] * wf[0] * kf[0, 0]).sum()  # a different order gives other bits here
    assert not torch.equal(other, dot[0, 0])


def test_bwd_partials_are_contiguous_token_runs():
    """Partial q is the in-order sum over tokens [q·ceil(T/P), (q+1)·ceil(T/P)) alone; trailing partials are +0."""
    t, h, p = 10, 512, 4  # ceil(10/4) = 3: runs of 3, 3, 3, 1
    x, kv, wh, we, _ = _inputs(t, 4, h, 9)
    wf = wh.float() * we.float()
    _, dot, g, rx, rk = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    go = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).bfloat16()
    _, _, part = engram_gate_bwd_ref(go, x, kv, wf, dot, g, rx, rk, CLAMP, num_partials=p)
    per = -(-t // p)
    for q in range(p):
        r = slice(q * per, min((q + 1) * per, t))
        alone = engram_gate_bwd_ref(go[r], x[r], kv[r], wf, dot[r], g[r], rx[r], rk[r], CLAMP, num_partials=1)[2][0]
        assert torch.equal(part[q].view(torch.int32), alone.view(torch.int32)), q
    _, _, many = engram_gate_bwd_ref(go, x, kv, wf, dot, g, rx, rk, CLAMP, num_partials=16)
    assert torch.equal(many[t:].view(torch.int32), torch.zeros(16 - t, 4, h).view(torch.int32))


def test_zero_tokens_references():
    x, kv, wh, we, _ = _inputs(0, 4, 512, 0)
    wf = wh.float() * we.float()
    out, dot, g, rx, rk = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    assert out.shape == (0, 4, 512) and dot.shape == (0, 4)
    gx, gkv, part = engram_gate_bwd_ref(x, x, kv, wf, dot, g, rx, rk, CLAMP, num_partials=5)
    assert gx.shape == x.shape and gkv.shape == kv.shape and torch.equal(part, torch.zeros(5, 4, 512))


@settings(max_examples=20, deadline=None)
@given(t=st.integers(1, 6), h=st.sampled_from([512, 768, 1024]),
       special=st.sampled_from([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 3e38]),
       where=st.sampled_from(["x", "k", "v"]), seed=st.integers(0, 2**16))
def test_fwd_ref_special_values_stay_in_their_row(t, h, special, where, seed):
    x, kv, wh, we, _ = _inputs(t, 4, h, seed)
    wf = wh.float() * we.float()
    base = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    tgt = x if where == "x" else kv
    row = {"x": 1, "k": 2, "v": 4}[where]
    tgt[0, min(row, tgt.shape[1] - 1), seed % h] = special
    got = engram_gate_fwd_ref(x, kv, wf, EPS, CLAMP)
    if t > 1:  # other tokens are untouched
        assert torch.equal(got[0][1:].view(torch.int16), base[0][1:].view(torch.int16))
    if where != "v":  # other heads of the token keep their gate
        head = min(row, 3)
        others = [i for i in range(4) if i != head]
        assert torch.equal(got[2][0, others], base[2][0, others])


# --- argument errors of the public functions (CPU tensors: they come before the device check) ---

def _ok(t=3, hc=4, h=512):
    x = torch.zeros(t, hc, h, dtype=torch.bfloat16)
    kv = torch.zeros(t, hc + 1, h, dtype=torch.bfloat16)
    w = torch.zeros(hc, h)
    s = torch.zeros(t, hc)
    return x, kv, w, s


FWD_ERRORS = [
    (lambda x, kv, w: (x.float(), kv, w), {}, TypeError, "hidden_states"),
    (lambda x, kv, w: (x[0], kv, w), {}, ValueError, "hidden_states"),
    (lambda x, kv, w: (x.new_zeros(3, 3, 512), kv.new_zeros(3, 4, 512), w.new_zeros(3, 512)), {}, ValueError,
     "hc_mult"),
    (lambda x, kv, w: (x.new_zeros(3, 4, 640), kv.new_zeros(3, 5, 640), w.new_zeros(4, 640)), {}, ValueError,
     "hidden_size"),
    (lambda x, kv, w: (x.new_zeros(3, 4, 256), kv.new_zeros(3, 5, 256), w.new_zeros(4, 256)), {}, ValueError,
     "hidden_size"),
    (lambda x, kv, w: (x, kv.float(), w), {}, TypeError, "kv"),
    (lambda x, kv, w: (x, kv[:, :4], w), {}, ValueError, "kv"),
    (lambda x, kv, w: (x, kv, w.bfloat16()), {}, TypeError, "weight_fused"),
    (lambda x, kv, w: (x, kv, w[:2]), {}, ValueError, "weight_fused"),
    (lambda x, kv, w: (x.transpose(0, 1).contiguous().transpose(0, 1), kv, w), {}, ValueError, "contiguous"),
    (lambda x, kv, w: (x, kv, w), {"image_token_mask": torch.zeros(3, dtype=torch.int32)}, TypeError,
     "image_token_mask"),
    (lambda x, kv, w: (x, kv, w), {"image_token_mask": torch.zeros(4, dtype=torch.bool)}, ValueError,
     "image_token_mask"),
    (lambda x, kv, w: (x, kv, w), {"save_for_backward": 1}, TypeError, "save_for_backward"),
    (lambda x, kv, w: (x, kv, w), {"inplace": None}, TypeError, "inplace"),
    (lambda x, kv, w: (x, kv, w), {"inplace": True}, ValueError, "save_for_backward=False"),
    (lambda x, kv, w: (x, kv, w), {"eps": "1e-6"}, TypeError, "eps"),
    (lambda x, kv, w: (x, kv, w), {"clamp_value": True}, TypeError, "clamp_value"),
]


@pytest.mark.parametrize("make,kw,exc,word", FWD_ERRORS)
def test_fwd_argument_errors(make, kw, exc, word):
    x, kv, w, _ = _ok()
    args = dict(eps=EPS, clamp_value=CLAMP)
    args.update(kw)
    x, kv, w = make(x, kv, w)
    with pytest.raises(exc, match=word):
        engram_gate_fwd(x, kv, w, **args)


def test_fwd_needs_cuda_last():
    x, kv, w, _ = _ok()
    with pytest.raises(ValueError, match="CUDA"):
        engram_gate_fwd(x, kv, w, EPS, CLAMP)
    with pytest.raises(ValueError, match="CUDA"):
        engram_gate_fwd(x, kv, w, EPS, CLAMP, False, None, True)


BWD_ERRORS = [
    ("grad_out", lambda a: a.update(grad_out=a["grad_out"].float()), TypeError),
    ("grad_out", lambda a: a.update(grad_out=a["grad_out"][:2]), ValueError),
    ("hc_mult", lambda a: a.update(grad_out=a["grad_out"][:, :2], hidden_states=a["hidden_states"][:, :2].contiguous(),
                                   kv=a["kv"][:, :3].contiguous(), weight_fused=a["weight_fused"][:2]), ValueError),
    ("dot", lambda a: a.update(dot=a["dot"].double()), TypeError),
    ("gate_score", lambda a: a.update(gate_score=a["gate_score"][:2]), ValueError),
    ("rstd_x", lambda a: a.update(rstd_x=a["rstd_x"].t().contiguous().t()), ValueError),
    ("rstd_k", lambda a: a.update(rstd_k=a["rstd_k"][:, :2]), ValueError),
    ("clamp_value", lambda a: a.update(clamp_value="x"), TypeError),
    ("image_token_mask", lambda a: a.update(image_token_mask=torch.zeros(2, dtype=torch.bool)), ValueError),
    ("kv", lambda a: a.update(kv=a["kv"][:, :4].contiguous()), ValueError),
]


@pytest.mark.parametrize("word,edit,exc", BWD_ERRORS)
def test_bwd_argument_errors(word, edit, exc):
    x, kv, w, s = _ok()
    a = dict(grad_out=x.clone(), hidden_states=x, kv=kv, weight_fused=w, dot=s, gate_score=s.clone(),
             rstd_x=s.clone(), rstd_k=s.clone(), clamp_value=CLAMP, image_token_mask=None)
    edit(a)
    with pytest.raises(exc, match=word):
        engram_gate_bwd(**a)


def test_bwd_needs_cuda_last():
    x, kv, w, s = _ok()
    with pytest.raises(ValueError, match="CUDA"):
        engram_gate_bwd(x, x, kv, w, s, s, s, s, CLAMP)


def test_fwd_contract_refuses_inplace_with_save():
    from kernelkiln_contract.engram_gate import ENGRAM_GATE_FWD
    with pytest.raises(ValueError, match="inplace"):
        ENGRAM_GATE_FWD.variant(hc_mult=4, save_for_backward=True, has_image_token_mask=False, inplace=True)
    assert ENGRAM_GATE_FWD.variant(hc_mult=4, save_for_backward=False, has_image_token_mask=False, inplace=True)
