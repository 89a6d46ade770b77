"""References of the v1 expert-major dispatch/combine ops (docs/SPEC.md §3.1, §3.9).

``get_fused_mapping`` reproduces the peer's slot order exactly (it depends on the SM count,
see ``kernels/moe/fused_mapping.py``); ``reduce_fused`` accumulates with exactly rounded fp32
FMAs (emulated in float64 with round-to-odd, so it matches the GPU on any backend).
Imports only torch.
"""
import torch

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "expand_to_fused",
    "expand_to_fused_with_sf",
    "fma_f32",
    "get_fused_mapping",
    "reduce_fused",
]

E4M3_MAX = 448.0


def _align(x, a):
    return (x + a - 1) // a * a


def fused_mapping_threads(num_experts):
    """Threads per CTA of the mapping kernel: the power of two >= E, at least 256."""
    n = 256
    while n < num_experts:
        n *= 2
    return n


def fused_mapping_chunk(numel, num_experts, num_sms):
    """Flat elements per warp: align32(ceil(T*K / (num_sms * warps per CTA)))."""
    warps = num_sms * (fused_mapping_threads(num_experts) // 32)
    return _align(-(-numel // warps), 32)


def get_fused_mapping(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync=False, num_sms=None):
    """Reference of v1 ``moe.get_fused_mapping`` -> (7 int32 tensors, list).

    Returns ``(pos_to_expert [N], pos_to_token [N], pos_to_token_topk [N], token_topk_to_pos [T, K],
    expert_start [E], expert_end [E], num_tokens_per_expert [E], num_tokens_per_expert_list)``.
    Expert e owns rows ``[expert_start[e], expert_end[e])`` (its count aligned up to ``alignment``),
    filled from the front; unused slots and ids outside [0, E) are -1. ``num_sms`` fixes the
    slot order (default: ``kernelkiln.config.get_num_sms()``).
    """
    if num_sms is None:
        from kernelkiln import config
        num_sms = config.get_num_sms()
    t, k = topk_idx.shape
    device = topk_idx.device
    should_sync = num_expanded_tokens == 0 and not force_no_sync
    if should_sync:
        num_expanded_tokens = _align(t * k + (alignment - 1) * num_experts, alignment)
    numel = t * k
    flat = topk_idx.reshape(-1).to(torch.int64)
    valid = (flat >= 0) & (flat < num_experts)
    counts = torch.bincount(flat[valid], minlength=num_experts)[:num_experts]
    aligned = (counts + alignment - 1) // alignment * alignment
    end = torch.cumsum(aligned, 0)
    start = end - aligned

    token_topk_to_pos = torch.full((numel,), -1, dtype=torch.int64, device=device)
    pos_to_expert = torch.full((num_expanded_tokens,), -1, dtype=torch.int32, device=device)
    pos_to_token = torch.full_like(pos_to_expert, -1)
    pos_to_token_topk = torch.full_like(pos_to_expert, -1)
    if numel:
        chunk = fused_mapping_chunk(numel, num_experts, num_sms)
        i = torch.arange(numel, device=device)
        # ascending chunks, descending flat order inside a chunk
        order_key = (i // chunk) * chunk + (chunk - 1 - i % chunk)
        vi = i[valid]
        ve = flat[valid]
        perm = torch.argsort(ve * (numel + chunk) + order_key[valid])
        vi, ve = vi[perm], ve[perm]
        first = torch.cumsum(counts, 0) - counts
        rank = torch.arange(vi.numel(), device=device) - first[ve]
        pos = start[ve] + rank
        token_topk_to_pos[vi] = pos
        keep = pos < num_expanded_tokens
        pos, vi, ve = pos[keep], vi[keep], ve[keep]
        pos_to_expert[pos] = ve.to(torch.int32)
        pos_to_token[pos] = (vi // k).to(torch.int32)
        pos_to_token_topk[pos] = vi.to(torch.int32)

    listed = []
    if should_sync:
        listed = aligned.tolist()
        n = sum(listed)
        pos_to_expert, pos_to_token, pos_to_token_topk = pos_to_expert[:n], pos_to_token[:n], pos_to_token_topk[:n]
    i32 = torch.int32
    return (pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos.view(t, k).to(i32),
            start.to(i32), end.to(i32), aligned.to(i32), listed)


def expand_to_fused(x, token_topk_to_pos, pos_to_expert):
    """Reference of v1 ``moe.expand_to_fused``: row t goes to every slot token_topk_to_pos[t, k] >= 0.

    Padding rows (pos_to_expert < 0) are zero here and in KernelKiln's kernel (the spec allows any content).
    """
    n = pos_to_expert.shape[0]
    out = torch.zeros((n, x.shape[1]), dtype=x.dtype, device=x.device)
    _scatter_rows(out, x, token_topk_to_pos)
    return out


def _scatter_rows(out, x, token_topk_to_pos):
    t, k = token_topk_to_pos.shape
    pos = token_topk_to_pos.reshape(-1).to(torch.int64)
    src = torch.arange(t, device=x.device).repeat_interleave(k)
    ok = (pos >= 0) & (pos < out.shape[0])
    out[pos[ok]] = x[src[ok]]


def expand_to_fused_with_sf(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf=False):
    """Reference of v1 ``moe.expand_to_fused_with_sf``: data and scale rows scattered together.

    ``x = (data [T, H], sf [T, H_sf])``; returns ``(out [N, H], out_sf [N, H_sf])`` where out_sf is a
    column-major view of a ``(H_sf, align(N, 4))`` buffer when ``use_tma_aligned_col_major_sf``.
    """
    data, sf = x
    out = expand_to_fused(data, token_topk_to_pos, pos_to_expert)
    n, h_sf = pos_to_expert.shape[0], sf.shape[1]
    if use_tma_aligned_col_major_sf:
        out_sf = torch.zeros((h_sf, _align(n, 4)), dtype=sf.dtype, device=sf.device)[:, :n].T
    else:
        out_sf = torch.zeros((n, h_sf), dtype=sf.dtype, device=sf.device)
    _scatter_rows(out_sf, sf, token_topk_to_pos)
    return out, out_sf


def fma_f32(a, b, c):
    """Exactly rounded fp32 ``a * b + c`` (elementwise, broadcasting).

    The product is exact in float64; the float64 sum is made round-to-odd (its error term
    comes from TwoSum), so the final rounding to fp32 is the single correct one.
    """
    a, b, c = (v.to(torch.float64) for v in torch.broadcast_tensors(a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    even = (s.view(torch.int64) & 1) == 0
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    fix = (err != 0) & even & torch.isfinite(s)
    s = torch.where(fix, torch.nextafter(s, toward), s)
    return s.to(torch.float32)


def reduce_fused(x, topk_weights, token_topk_to_pos, fp8_format="", sf=None):
    """Reference of v1 ``moe.reduce_fused``: out[t] = sum_k x[pos_k] * (w_k * x_sf[pos_k]), k = 0..K-1.

    ``x`` is ``[N, H]`` or ``(data [N, H], x_sf [N] fp32)``. The accumulator starts at +0 and takes one
    fp32 FMA per valid slot (pos >= 0) in k order; then ``acc * sf[0]`` and a cast to x.dtype, or to
    e4m3 (``fp8_format='e4m3'``) saturating at +-448 as the kernel's ``cvt.satfinite`` does.
    """
    x, x_sf = x if isinstance(x, tuple) else (x, None)
    t, k = token_topk_to_pos.shape
    h = x.shape[1]
    out_dtype = torch.float8_e4m3fn if fp8_format == "e4m3" else x.dtype
    acc = torch.zeros((t, h), dtype=torch.float32, device=x.device)
    for j in range(k):
        pos = token_topk_to_pos[:, j].to(torch.int64)
        ok = pos >= 0
        if not bool(ok.any()):
            continue
        safe = pos.clamp(min=0)
        s = topk_weights[:, j].float() if topk_weights is not None else torch.ones(t, device=x.device)
        if x_sf is not None:
            s = s * x_sf[safe].float()
        rows = x[safe].float()
        acc = torch.where(ok[:, None], fma_f32(rows, s[:, None], acc), acc)
    if sf is not None:
        acc = acc * float(sf.reshape(-1)[0])
    if out_dtype == torch.float8_e4m3fn:
        acc = acc.clamp(-E4M3_MAX, E4M3_MAX)
    return acc.to(out_dtype)
