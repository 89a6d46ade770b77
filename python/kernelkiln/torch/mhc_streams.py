"""References of the mHC stream ops (torch only).

``expand_to_mhc_ref``, ``mhc_pre_apply_mix_ref`` and ``mhc_post_ref`` have tile_kernels 2.1's names, signatures and
semantics (torch's own summation order: for tolerance checks). The ``*_fwd_ref`` / ``*_bwd_ref`` and
``mhc_multilayer_recompute_ref`` functions are ours: they evaluate in the kernels' order (docs/spec/mhc_streams.md)
with exactly rounded fp32 fma (``fma_f32``), so the kernels are checked against them bit for bit. Their bf16 and
fp32 NaNs are the GPU's canonical positive NaN (CPU conversions keep a NaN's sign and payload).
"""
import torch

from kernelkiln.torch.fused import fma_f32

__all__ = ["expand_to_mhc_ref", "mhc_pre_apply_mix_ref", "mhc_post_ref", "expand_to_mhc_fwd_ref",
           "expand_to_mhc_bwd_ref", "mhc_pre_apply_mix_fwd_ref", "mhc_pre_apply_mix_bwd_ref", "mhc_post_fwd_ref",
           "mhc_post_bwd_ref", "mhc_multilayer_recompute_ref", "stream_dot_ref"]

STREAM_THREADS, POST_BWD_THREADS, STREAM_VEC = 128, 64, 8  # the backward kernels' reduction layout (kernelkiln_contract)
_NAN_BITS = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float32: (torch.int32, 0x7FFFFFFF)}


def _canonical_nan(t):
    int_dtype, bits = _NAN_BITS[t.dtype]
    return t.view(int_dtype).masked_fill(torch.isnan(t), bits).view(t.dtype)


def _bf16(t):
    """fp32 -> bf16 round-to-nearest-even, NaN as the GPU's."""
    return _canonical_nan(t.to(torch.bfloat16))


def _flat_mix(mix, m):
    """A ``[..., m]`` or ``[..., m, 1]`` mix as ``[..., m]``."""
    return mix.reshape(*mix.shape[:-2], m) if mix.dim() >= 2 and mix.shape[-1] == 1 and mix.shape[-2] == m else mix


# ------------------------------------------------------------------------------------------ peer semantics
def expand_to_mhc_ref(hidden: torch.Tensor, mhc_mult: int) -> torch.Tensor:
    """``hidden`` ``[..., H]`` repeated into ``mhc_mult`` streams, a new contiguous ``[..., mhc_mult, H]``."""
    return torch.stack([hidden] * mhc_mult, dim=-2)


def mhc_pre_apply_mix_ref(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """``Σ_s x[..., s, :] · mix[..., s, 0]`` in fp32 (torch's sum), rounded to bf16; mix is ``[..., m, 1]``."""
    return torch.sum(mix * x.float(), dim=-2).to(torch.bfloat16)


def mhc_post_ref(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                 comb_res_mix: torch.Tensor) -> torch.Tensor:
    """``post[o] · x + Σ_i comb[i, o] · residual[i]`` in fp32 (torch's einsum), rounded to bf16; x ``[a, b, H]``,
    residual ``[a, b, m, H]``, post ``[a, b, m, 1]``, comb ``[a, b, m, m]``."""
    mixed = torch.einsum("abio,abih->aboh", comb_res_mix, residual.float())
    return (post_layer_mix * x.float().unsqueeze(-2) + mixed).to(torch.bfloat16)


# ------------------------------------------------------------------------------------------ the kernels' order
def expand_to_mhc_fwd_ref(x: torch.Tensor, mhc_mult: int) -> torch.Tensor:
    """The expansion (a copy: exact, NaN payloads kept)."""
    return expand_to_mhc_ref(x, mhc_mult)


def expand_to_mhc_bwd_ref(o_grad: torch.Tensor) -> torch.Tensor:
    """``bf16(((0 + g_0) + g_1) + ...)`` over the streams of ``o_grad`` ``[..., m, H]`` bf16."""
    g = o_grad.float()
    acc = torch.zeros(g.shape[:-2] + g.shape[-1:], dtype=torch.float32, device=g.device)
    for s in range(g.shape[-2]):
        acc = acc + g[..., s, :]
    return _bf16(acc)


def mhc_pre_apply_mix_fwd_ref(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """``bf16(fma(m_(m-1), x_(m-1), ... fma(m_1, x_1, m_0 · x_0)))``: x ``[..., m, H]`` bf16, mix ``[..., m]`` or
    ``[..., m, 1]`` fp32 -> ``[..., H]`` bf16."""
    m = x.shape[-2]
    w = _flat_mix(mix, m).float()
    xf = x.float()
    acc = w[..., 0:1] * xf[..., 0, :]
    for s in range(1, m):
        acc = fma_f32(w[..., s:s + 1], xf[..., s, :], acc)
    return _bf16(acc)


def mhc_post_fwd_ref(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                     comb_res_mix: torch.Tensor) -> torch.Tensor:
    """``out_o = bf16(fma over i = 1 .. m-1 of comb[i, o] · r_i, from fma(c_o, x, comb[0, o] · r_0))``: x ``[..., H]``,
    residual ``[..., m, H]`` bf16, post ``[..., m, 1]`` or ``[..., m]``, comb ``[..., m, m]`` fp32 -> ``[..., m, H]``
    bf16."""
    m = residual.shape[-2]
    c = _flat_mix(post_layer_mix, m).float()
    comb = comb_res_mix.float()
    r = residual.float()
    acc = comb[..., 0, :].unsqueeze(-1) * r[..., 0:1, :]
    acc = fma_f32(c.unsqueeze(-1), x.float().unsqueeze(-2), acc)
    for i in range(1, m):
        acc = fma_f32(comb[..., i, :].unsqueeze(-1), r[..., i:i + 1, :], acc)
    return _bf16(acc)


def stream_dot_ref(a: torch.Tensor, b: torch.Tensor, threads: int = STREAM_THREADS) -> torch.Tensor:
    """``Σ_h a[..., h] · b[..., h]`` (fp32) in the backward kernels' order (the peer's): thread t of ``threads``
    (128 for mhc_pre_apply_mix_bwd, 64 for mhc_post_bwd) owns the 8-column groups k·threads + t and accumulates
    ``fma(a, b, acc)`` from +0 in (k, column) order; the threads' partials are combined by the xor butterfly of
    tl::AllReduce (offsets threads/2 .. 1, largest first), i.e. the upper half is added to the lower half until one
    partial is left."""
    if threads not in (32, 64, 128, 256):
        raise ValueError(f"threads must be 32, 64, 128 or 256, got {threads}")
    a, b = torch.broadcast_tensors(a.float(), b.float())
    lead, h = a.shape[:-1], a.shape[-1]
    span = threads * STREAM_VEC
    k = -(-h // span)
    pad = k * span - h
    # the kernels' partials never hold -0 (they start at +0), so the zero padding adds nothing, not even a sign
    a = torch.nn.functional.pad(a.reshape(-1, h), (0, pad)).view(-1, k, threads, STREAM_VEC)
    b = torch.nn.functional.pad(b.reshape(-1, h), (0, pad)).view(-1, k, threads, STREAM_VEC)
    acc = torch.zeros(a.shape[0], threads, dtype=torch.float32, device=a.device)
    for kk in range(k):
        for j in range(STREAM_VEC):
            acc = fma_f32(a[:, kk, :, j], b[:, kk, :, j], acc)
    while acc.shape[-1] > 1:
        half = acc.shape[-1] // 2
        acc = acc[:, :half] + acc[:, half:]
    return _canonical_nan(acc[:, 0].reshape(lead))


def mhc_pre_apply_mix_bwd_ref(o_grad: torch.Tensor, x: torch.Tensor, mix: torch.Tensor,
                              x_grad: torch.Tensor) -> torch.Tensor:
    """In place ``x_grad = bf16(fma(mix_s, og, x_grad))``; returns ``mix_grad`` ``[..., m]`` fp32 =
    ``stream_dot_ref(og, x_s)``. o_grad ``[..., H]``, x and x_grad ``[..., m, H]`` bf16, mix ``[..., m]`` fp32."""
    m = x.shape[-2]
    w = _flat_mix(mix, m).float()
    og = o_grad.float().unsqueeze(-2)
    x_grad.copy_(_bf16(fma_f32(w.unsqueeze(-1), og, x_grad.float())))
    return stream_dot_ref(og, x.float())


def mhc_post_bwd_ref(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                     comb_res_mix: torch.Tensor, d_o: torch.Tensor):
    """``(d_x, d_residual, d_post_layer_mix, d_comb_res_mix)``: ``d_residual_i = bf16(Σ_o comb[i, o] · g_o)`` and
    ``d_x = bf16(Σ_o post_o · g_o)`` as fma chains over o from +0; ``d_comb[i, o] = stream_dot_ref(r_i, g_o, 64)``
    and ``d_post[o] = stream_dot_ref(x, g_o, 64)``; each shaped like the matching input."""
    m = residual.shape[-2]
    g = d_o.float()
    c = _flat_mix(post_layer_mix, m).float()
    comb = comb_res_mix.float()
    d_res = torch.zeros(g.shape, dtype=torch.float32, device=g.device)
    d_x = torch.zeros(x.shape, dtype=torch.float32, device=g.device)
    for o in range(m):
        d_res = fma_f32(comb[..., :, o].unsqueeze(-1), g[..., o:o + 1, :], d_res)
        d_x = fma_f32(c[..., o:o + 1], g[..., o, :], d_x)
    r = residual.float()
    d_comb = torch.stack([stream_dot_ref(r[..., i:i + 1, :], g, POST_BWD_THREADS) for i in range(m)],
                         dim=-2)  # [..., i, o]
    d_post = stream_dot_ref(x.float().unsqueeze(-2), g, POST_BWD_THREADS)  # [..., o]
    return (_bf16(d_x), _bf16(d_res), d_post.reshape(post_layer_mix.shape),
            d_comb.reshape(comb_res_mix.shape))


def mhc_multilayer_recompute_ref(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list,
                                 layer_input_list, residual_list) -> None:
    """The chain ``layer_input[l] = mhc_pre_apply_mix_fwd_ref(r, pre[l])``, ``residual[l] = r =
    mhc_post_fwd_ref(layer_output[l], r, post[l], comb[l])`` for l < L_post, then the last layer's input when
    L_post = L - 1; written into the given tensors (any shapes with the right element counts); returns None."""
    m, h = initial_residual.shape[-2:]
    r = initial_residual.reshape(-1, m, h)
    n = r.shape[0]
    for layer, pre in enumerate(pre_mix_list):
        layer_input_list[layer].copy_(mhc_pre_apply_mix_fwd_ref(r, pre.reshape(n, m)).view(
            layer_input_list[layer].shape))
        if layer < len(layer_output_list):
            r = mhc_post_fwd_ref(layer_output_list[layer].reshape(n, h), r, post_mix_list[layer].reshape(n, m),
                                 comb_mix_list[layer].reshape(n, m, m))
            residual_list[layer].copy_(r.view(residual_list[layer].shape))
