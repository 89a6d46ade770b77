"""References of the Engram hash and the gate weight's product and gradient reduction (torch only).

``make_offsets`` and ``engram_hash_ref`` have tile_kernels 2.1's names, signatures and results (integer arithmetic:
any correct evaluation gives the same bits). The module also holds every other Engram reference of the peer's
``tile_kernels.torch.engram`` (the gate and the Sinkhorn steps, from their own modules), so tests that import that
module path find them here. ``fused_weight_ref`` and ``grad_w_reduce_ref`` are ours: they compute
in the kernels' order (the partial rows added in turn, then one fma per gradient), so the kernels are checked
against them bit for bit.
"""
import torch

from kernelkiln.torch.engram_gate import engram_gate_ref
from kernelkiln.torch.engram_sinkhorn import (
    engram_sinkhorn_finalize_ref,
    engram_sinkhorn_momentum_update_ref,
    engram_sinkhorn_step_ref,
)
from kernelkiln.torch.fused import fma_f32

__all__ = ["make_offsets", "engram_hash_ref", "fused_weight_ref", "grad_w_reduce_ref",
           # the peer's tile_kernels.torch.engram module path: the references of the gate and the Sinkhorn steps
           "engram_gate_ref", "engram_sinkhorn_momentum_update_ref", "engram_sinkhorn_step_ref",
           "engram_sinkhorn_finalize_ref"]


def make_offsets(vocab_sizes: torch.Tensor) -> torch.Tensor:
    """Offsets ``[L, (n-1)·M]`` int32 of the tables laid end to end, per layer: the exclusive prefix sums of each
    layer's flattened ``[n-1, M]`` vocab sizes."""
    flat = vocab_sizes.reshape(vocab_sizes.shape[0], -1)
    inclusive = flat.cumsum(dim=1, dtype=torch.int32)
    return torch.cat((torch.zeros_like(flat[:, :1]), inclusive[:, :-1]), dim=1)


def engram_hash_ref(ngram_token_ids, multipliers, vocab_sizes, offsets, image_token_mask=None):
    """Table rows ``[L, T, (n-1)·M]`` int32: per layer l and token t, ``h`` xor-accumulates ``int64(id[t, i]) ·
    mult[l, i]`` (wrapping) and after each i ≥ 1 gives ``h mod vocab[l, i-1, j]`` (floor modulo) plus the table's
    offset; image tokens (mask True) get -1."""
    n = ngram_token_ids.shape[1]
    products = ngram_token_ids.to(torch.int64)[None, :, :] * multipliers[:, None, :]  # [L, T, n], wrapping
    h = products[:, :, 0]
    columns = []
    for i in range(1, n):
        h = h ^ products[:, :, i]
        sizes = vocab_sizes[:, i - 1, :].to(torch.int64)  # [L, M]
        columns.append(torch.remainder(h[:, :, None], sizes[:, None, :]))
    rows = torch.cat(columns, dim=2) + offsets.to(torch.int64)[:, None, :]
    out = rows.to(torch.int32)  # truncation, as the kernel's int32 store
    if image_token_mask is not None:
        out = out.masked_fill(image_token_mask[None, :, None], -1)
    return out


def fused_weight_ref(weight_hidden, weight_embed):
    """``float(weight_hidden) · float(weight_embed)`` (exact for bf16 inputs)."""
    return weight_hidden.float() * weight_embed.float()


def grad_w_reduce_ref(grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed):
    """In place, in the kernel's order: ``S = ((0 + p_0) + p_1) + ...`` over the partial rows, then
    ``grad_weight_hidden = fma(S, weight_embed, grad_weight_hidden)`` and ``grad_weight_embed = fma(S, weight_hidden,
    grad_weight_embed)``; returns None."""
    s = torch.zeros(grad_w_partial.shape[1:], dtype=torch.float32, device=grad_w_partial.device)
    for row in grad_w_partial:
        s = s + row
    grad_weight_hidden.copy_(fma_f32(s, weight_embed.float(), grad_weight_hidden))
    grad_weight_embed.copy_(fma_f32(s, weight_hidden.float(), grad_weight_embed))
