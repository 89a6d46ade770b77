"""The Engram gate layer: fused weight, gate forward, and in backward the gate backward and the weight reduction.

``EngramGateFn`` is tile_kernels 2.1's autograd Function, call for call: ``engram_gate(hidden_states, kv,
weight_hidden, weight_embed, clamp_value, eps, image_token_mask)`` with ``hidden_states [*, hc, H]`` bf16, ``kv
[*, (hc+1)·H]`` bf16 (flattened: the gradient comes back in that shape), weights ``[hc, H]`` bf16. A weight with a
``main_grad`` attribute (an fp32 buffer, Megatron style) gets its gradient accumulated there and ``None`` returned
for it; otherwise fresh fp32 gradients are returned (autograd casts them to the weight's dtype).

Under ``torch.compile`` the same computation goes through two registered ops, ``kernelkiln::engram_gate_layer`` and
its derivative ``kernelkiln::engram_gate_layer_backward`` (fake implementations and an autograd formula), so
``fullgraph=True`` traces it. There the weights' gradients are always returned (``main_grad`` is an eager-mode
protocol: a compiled graph cannot accumulate into a buffer it does not take as an input).
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.engram import engram_gate_bwd, engram_gate_fwd, fused_weight, grad_w_reduce
from kernelkiln.engram._fused_weight import check_weights

__all__ = ["EngramGateFn", "engram_gate"]


def _check(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask):
    """The flattened shapes (N, hc, H); raises naming the argument."""
    checks.tensor("hidden_states", hidden_states, (torch.bfloat16,))
    if hidden_states.dim() < 2:
        raise ValueError(f"hidden_states must be [*, hc, H], got shape {tuple(hidden_states.shape)}")
    *lead, hc, h = hidden_states.shape
    checks.tensor("weight_hidden", weight_hidden, (torch.bfloat16,))
    if tuple(weight_hidden.shape) != (hc, h):
        raise ValueError(f"weight_hidden must have shape [hc, H] = {[hc, h]} (from hidden_states), got "
                         f"{list(weight_hidden.shape)}")
    check_weights(weight_hidden, weight_embed)
    checks.tensor("kv", kv, (torch.bfloat16,))
    want = (*lead, (hc + 1) * h)
    if tuple(kv.shape) != want:
        raise ValueError(f"kv must be flattened to [*, (hc + 1) * H] = {list(want)} (its gradient comes back in that "
                         f"shape), got {list(kv.shape)}")
    checks.float_arg("clamp_value", clamp_value)
    checks.float_arg("eps", eps)
    if image_token_mask is not None:
        checks.tensor("image_token_mask", image_token_mask, (torch.bool,))
        if tuple(image_token_mask.shape) != tuple(lead) and image_token_mask.numel() != hidden_states.numel() // (hc * h):
            raise ValueError(f"image_token_mask must have one entry per token, shape {list(lead)}, got "
                             f"{list(image_token_mask.shape)}")
    return hidden_states.numel() // (hc * h) if hc * h else 0, hc, h


def _flat(hidden_states, kv, image_token_mask, hc, h):
    x = hidden_states.reshape(-1, hc, h)
    kv3 = kv.reshape(-1, hc + 1, h)
    mask = image_token_mask.reshape(-1) if image_token_mask is not None else None
    return x, kv3, mask


def _weight_grads(grad_w_partial, weight_hidden, weight_embed, use_main_grad):
    main_h = getattr(weight_hidden, "main_grad", None) if use_main_grad else None
    main_e = getattr(weight_embed, "main_grad", None) if use_main_grad else None
    gwh = main_h if main_h is not None else torch.zeros_like(weight_hidden, dtype=torch.float32)
    gwe = main_e if main_e is not None else torch.zeros_like(weight_embed, dtype=torch.float32)
    grad_w_reduce(grad_w_partial, weight_hidden, weight_embed, gwh, gwe)
    return (None if main_h is not None else gwh), (None if main_e is not None else gwe)


class EngramGateFn(torch.autograd.Function):
    """``output = hidden_states + sigmoid(signed_sqrt(clamped scaled dot of the RMS-normalized x·wh and k·we)) · v``
    per head, with the kernels' numerics (kernelkiln.engram); see the module doc for the arguments."""

    @staticmethod
    def forward(ctx, hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask):
        _, hc, h = _check(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask)
        x, kv3, mask = _flat(hidden_states, kv, image_token_mask, hc, h)
        wf = fused_weight(weight_hidden, weight_embed)
        out, dot, gate, rx, rk = engram_gate_fwd(x, kv3, wf, eps, clamp_value, image_token_mask=mask)
        ctx.save_for_backward(x, kv3, weight_hidden, weight_embed, wf, dot, gate, rx, rk, mask)
        ctx.clamp_value = clamp_value
        ctx.shapes = (hidden_states.shape, kv.shape)
        return out.view(hidden_states.shape)

    @staticmethod
    def backward(ctx, grad_output):
        x, kv3, wh, we, wf, dot, gate, rx, rk, mask = ctx.saved_tensors
        x_shape, kv_shape = ctx.shapes
        go = grad_output.reshape(x.shape).contiguous()
        grad_x, grad_kv, partial = engram_gate_bwd(go, x, kv3, wf, dot, gate, rx, rk, ctx.clamp_value,
                                                   image_token_mask=mask)
        gwh, gwe = _weight_grads(partial, wh, we, use_main_grad=True)
        return grad_x.view(x_shape), grad_kv.view(kv_shape), gwh, gwe, None, None, None


# The compile path: one op for the forward (its saved tensors are outputs), one for its derivative.
@library_op("engram_gate_layer")
def _layer_op(hidden_states: torch.Tensor, kv: torch.Tensor, weight_hidden: torch.Tensor, weight_embed: torch.Tensor,
              clamp_value: float, eps: float, image_token_mask: Optional[torch.Tensor]
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _, hc, h = _check(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask)
    x, kv3, mask = _flat(hidden_states, kv, image_token_mask, hc, h)
    wf = fused_weight(weight_hidden, weight_embed)
    out, dot, gate, rx, rk = engram_gate_fwd(x, kv3, wf, eps, clamp_value, image_token_mask=mask)
    return out.view(hidden_states.shape), wf, dot, gate, rx, rk


@_layer_op.register_fake
def _layer_fake(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask):
    n, hc, h = _check(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask)
    saved = [hidden_states.new_empty((n, hc), dtype=torch.float32) for _ in range(4)]
    return (torch.empty_like(hidden_states, memory_format=torch.contiguous_format),
            weight_hidden.new_empty((hc, h), dtype=torch.float32), *saved)


@library_op("engram_gate_layer_backward")
def _layer_backward_op(grad_output: torch.Tensor, hidden_states: torch.Tensor, kv: torch.Tensor,
                       weight_hidden: torch.Tensor, weight_embed: torch.Tensor, weight_fused: torch.Tensor,
                       dot: torch.Tensor, gate_score: torch.Tensor, rstd_x: torch.Tensor, rstd_k: torch.Tensor,
                       clamp_value: float, image_token_mask: Optional[torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _, hc, h = _check(hidden_states, kv, weight_hidden, weight_embed, clamp_value, 0.0, image_token_mask)
    x, kv3, mask = _flat(hidden_states, kv, image_token_mask, hc, h)
    go = grad_output.reshape(x.shape).contiguous()
    grad_x, grad_kv, partial = engram_gate_bwd(go, x, kv3, weight_fused, dot, gate_score, rstd_x, rstd_k,
                                               clamp_value, image_token_mask=mask)
    gwh, gwe = _weight_grads(partial, weight_hidden, weight_embed, use_main_grad=False)
    return grad_x.view(hidden_states.shape), grad_kv.view(kv.shape), gwh, gwe


@_layer_backward_op.register_fake
def _layer_backward_fake(grad_output, hidden_states, kv, weight_hidden, weight_embed, weight_fused, dot, gate_score,
                         rstd_x, rstd_k, clamp_value, image_token_mask):
    _check(hidden_states, kv, weight_hidden, weight_embed, clamp_value, 0.0, image_token_mask)
    return (torch.empty_like(hidden_states, memory_format=torch.contiguous_format),
            torch.empty_like(kv, memory_format=torch.contiguous_format),
            weight_hidden.new_empty(weight_hidden.shape, dtype=torch.float32),
            weight_embed.new_empty(weight_embed.shape, dtype=torch.float32))


def _setup_context(ctx, inputs, output):
    hidden_states, kv, weight_hidden, weight_embed, clamp_value, _eps, image_token_mask = inputs
    _, wf, dot, gate, rx, rk = output
    ctx.save_for_backward(hidden_states, kv, weight_hidden, weight_embed, wf, dot, gate, rx, rk, image_token_mask)
    ctx.clamp_value = clamp_value


def _backward(ctx, grad_out, *_unused_grads):
    hidden_states, kv, wh, we, wf, dot, gate, rx, rk, mask = ctx.saved_tensors
    grad_x, grad_kv, gwh, gwe = _layer_backward_op(grad_out, hidden_states, kv, wh, we, wf, dot, gate, rx, rk,
                                                   ctx.clamp_value, mask)
    return grad_x, grad_kv, gwh, gwe, None, None, None


_layer_op.register_autograd(_backward, setup_context=_setup_context)


def engram_gate(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask):
    """``EngramGateFn.apply`` (seven positional arguments, as tile_kernels 2.1's); under ``torch.compile`` the
    registered ``kernelkiln::engram_gate_layer`` op with its autograd formula."""
    if torch.compiler.is_compiling():
        return _layer_op(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask)[0]
    return EngramGateFn.apply(hidden_states, kv, weight_hidden, weight_embed, clamp_value, eps, image_token_mask)
