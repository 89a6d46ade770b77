"""References of the Engram gate (tile_kernels 2.1 ``engram_gate_fwd`` / ``engram_gate_bwd``).

``engram_gate_ref`` is the peer's torch reference in semantics (its signature; two bf16 weights, plain torch ops,
autograd-capable): the tolerance oracle. ``engram_gate_fwd_ref`` / ``engram_gate_bwd_ref`` compute what the kernels
compute in the kernels' order (the lane ownership of every sum, the butterfly, each fma; specification in
kernelkiln_contract.engram_gate), on any device: on the GPU they are bit-identical to the kernels (torch's CUDA
rsqrt and exp are the same rsqrtf and expf); on the CPU those two functions differ in the last bits, so there they
agree with the kernels to rounding of rx, rk and g.
"""
import torch

from kernelkiln.torch.fused import fma_f32

__all__ = ["engram_gate_ref", "engram_gate_fwd_ref", "engram_gate_bwd_ref"]

_GROUP = 256  # elements of a group: 32 lanes x 8 (forward), 2 warps x 32 lanes x 4 (backward)


def engram_gate_ref(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, save_for_backward=False,
                    image_token_mask=None):
    """output = x + sigmoid(signed_sqrt(<x·wh, k·we> · rstd_x · rstd_k / sqrt(H))) · v, with RMS statistics of x
    and k; plain fp32 torch (differentiable). ``save_for_backward=True`` returns ``(output, raw_dot, gate, rstd_x,
    rstd_k)``. Image tokens keep their input row. sign(0) = 0 makes d = 0 give 0.5 (the kernel: copysign)."""
    hc, h = hidden_states.shape[1], hidden_states.shape[2]
    x = hidden_states.float()
    k = kv[:, :hc].float()
    v = kv[:, hc].float()
    rstd_x = torch.rsqrt(x.square().mean(dim=-1) + eps)
    rstd_k = torch.rsqrt(k.square().mean(dim=-1) + eps)
    raw = torch.einsum("thd,thd->th", x * weight_hidden.float(), k * weight_embed.float())
    d = raw * rstd_x * rstd_k * (h ** -0.5)
    gate = (d.abs().clamp_min(clamp_value).sqrt() * d.sign()).sigmoid()
    output = (x + gate.unsqueeze(-1) * v.unsqueeze(1)).to(torch.bfloat16)
    if image_token_mask is not None:
        output = torch.where(image_token_mask.view(-1, 1, 1), hidden_states, output)
    if save_for_backward:
        return output, raw, gate, rstd_x, rstd_k
    return output


def _f32(v, like):
    return torch.tensor(v, dtype=torch.float32, device=like.device)


def _butterfly(acc):
    """The xor butterfly over the last (lane) axis of 32: offsets 16, 8, 4, 2, 1; lane 0's sum."""
    lanes = torch.arange(32, device=acc.device)
    for off in (16, 8, 4, 2, 1):
        acc = acc + acc[..., lanes ^ off]
    return acc[..., 0]


def engram_gate_fwd_ref(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward=True,
                        image_token_mask=None):
    """The forward in the kernel's order: ``(output, dot, gate_score, rstd_x, rstd_k)`` (the last four None without
    save_for_backward). Lane l sums the elements c·256 + 8l + j serially (c-major, j), with fma; then the butterfly.
    Image tokens: output row = input row, their saved rows NaN (the kernel leaves them unwritten)."""
    t, hc, h = hidden_states.shape
    groups = h // _GROUP
    x = hidden_states.float().view(t, hc, groups, 32, 8)
    k = kv[:, :hc].float().reshape(t, hc, groups, 32, 8)
    w = weight_fused.view(1, hc, groups, 32, 8)
    xw = x * w  # exact: a bf16 times a product of two bf16
    sx = torch.zeros((t, hc, 32), dtype=torch.float32, device=x.device)
    sk, sd = sx.clone(), sx.clone()
    for c in range(groups):
        for j in range(8):
            xc, kc = x[:, :, c, :, j], k[:, :, c, :, j]
            sx = fma_f32(xc, xc, sx)
            sk = fma_f32(kc, kc, sk)
            sd = fma_f32(xw[:, :, c, :, j], kc, sd)
    sx, sk, sd = _butterfly(sx), _butterfly(sk), _butterfly(sd)
    hidden, eps32 = _f32(float(h), x), _f32(eps, x)
    rx = torch.rsqrt(sx / hidden + eps32)
    rk = torch.rsqrt(sk / hidden + eps32)
    d = sd * rx * rk * _f32(h ** -0.5, x)
    y = torch.copysign(torch.clamp(d.abs(), min=_f32(clamp_value, x)).sqrt(), d)
    g = 1.0 / (1.0 + torch.exp(-y))
    v = kv[:, hc].float().unsqueeze(1)
    out = fma_f32(g.unsqueeze(-1), v, hidden_states.float()).to(torch.bfloat16)
    saved = (sd, g, rx, rk)
    if image_token_mask is not None:
        m = image_token_mask.view(-1)
        out = torch.where(m.view(-1, 1, 1), hidden_states, out)
        saved = tuple(torch.where(m.view(-1, 1), torch.full_like(s, float("nan")), s) for s in saved)
    return (out,) + (saved if save_for_backward else (None,) * 4)


def engram_gate_bwd_ref(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                        image_token_mask=None, num_partials=1):
    """The backward in the kernel's order: ``(grad_x, grad_kv, grad_w_partial [num_partials, hc, H])``. G = Σ go·v
    with warp w, lane l summing c·256 + 128w + 4l + j serially, butterfly, then S_0 + S_1; partial p sums the
    tokens [p·ceil(T/P), (p+1)·ceil(T/P)) in order, from +0 (``num_partials`` is the kernel's SM count)."""
    t, hc, h = hidden_states.shape
    groups = h // _GROUP
    dev = hidden_states.device
    go = grad_out.float()
    x = hidden_states.float()
    k = kv[:, :hc].float()
    v = kv[:, hc].float()
    gov = go.view(t, hc, groups, 2, 32, 4)
    vv = v.view(t, 1, groups, 2, 32, 4)
    acc = torch.zeros((t, hc, 2, 32), dtype=torch.float32, device=dev)
    for c in range(groups):
        for j in range(4):
            acc = fma_f32(gov[:, :, c, :, :, j], vv[:, :, c, :, :, j], acc)
    s_half = _butterfly(acc)  # [t, hc, 2]
    big_g = s_half[..., 0] + s_half[..., 1]
    scalar = _f32(h ** -0.5, x)
    hidden = _f32(float(h), x)
    raw, g, rx, rk = dot, gate_score, rstd_x, rstd_k
    clamped = raw.abs() * scalar * rx * rk < _f32(clamp_value, x)
    dg = big_g * g * (1.0 - g) * 0.5 * torch.sqrt(scalar * rx * rk / raw.abs())
    dg = torch.where(clamped, torch.zeros_like(dg), dg)
    cx = raw * rx * rx / hidden
    ck = raw * rk * rk / hidden
    w = weight_fused.unsqueeze(0)
    dgx, cxx, ckx = dg.unsqueeze(-1), cx.unsqueeze(-1), ck.unsqueeze(-1)
    grad_x = fma_f32(fma_f32(k, w, -(x * cxx)), dgx, go).to(torch.bfloat16)
    grad_k = (fma_f32(x, w, -(k * ckx)) * dgx).to(torch.bfloat16)
    gv = torch.zeros((t, h), dtype=torch.float32, device=dev)
    for hh in range(hc):
        gv = fma_f32(go[:, hh], g[:, hh].unsqueeze(-1), gv)
    grad_kv = torch.cat((grad_k, gv.to(torch.bfloat16).unsqueeze(1)), dim=1)
    valid = torch.ones(t, dtype=torch.bool, device=dev)
    if image_token_mask is not None:
        m = image_token_mask.view(-1)
        valid = ~m
        grad_x = torch.where(m.view(-1, 1, 1), grad_out, grad_x)
        grad_kv = torch.where(m.view(-1, 1, 1), torch.zeros_like(grad_kv), grad_kv)
    # partial p: tokens p·per .. in order; all partials advance together, one token of each per step
    per = -(-t // num_partials) if t else 0
    part = torch.zeros((num_partials, hc, h), dtype=torch.float32, device=dev)
    term_a = (dgx * x)  # dg·x, rounded as the kernel's product
    for i in range(per):
        idx = torch.arange(num_partials, device=dev) * per + i
        ok = idx < t
        idx_c = idx.clamp(max=max(t - 1, 0))
        upd = fma_f32(term_a[idx_c], k[idx_c], part)
        use = (ok & valid[idx_c]).view(-1, 1, 1)
        part = torch.where(use, upd, part)
    return grad_x, grad_kv, part
