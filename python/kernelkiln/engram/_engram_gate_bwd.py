"""engram_gate_bwd (tile_kernels 2.1 ``engram.engram_gate_bwd``): the Engram gate backward, hc = 4.

Spec: kernelkiln_contract.engram_gate.ENGRAM_GATE_BWD (docs/spec/). The partial count is ``config.get_num_sms()``
at the call, as in the peer; ``grad_w_reduce`` sums the partials into the two weight gradients.
"""
from typing import Optional

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.engram._engram_gate_fwd import check_device, check_gate_inputs
from kernelkiln_contract.engram_gate import ENGRAM_GATE_BWD as CONTRACT
from kernelkiln_contract.engram_gate import GATE_ALIGN, GATE_BWD_HC

__all__ = ["engram_gate_bwd"]

_SAVED = ("dot", "gate_score", "rstd_x", "rstd_k")


def _check(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value, image_token_mask,
           device=True):
    t, hc, h = check_gate_inputs(hidden_states, kv, weight_fused, image_token_mask, GATE_BWD_HC)
    checks.tensor("grad_out", grad_out, (torch.bfloat16,), ndim=3)
    if tuple(grad_out.shape) != (t, hc, h):
        raise ValueError(f"grad_out must have hidden_states' shape {(t, hc, h)}, got {tuple(grad_out.shape)}")
    for name, x in zip(_SAVED, (dot, gate_score, rstd_x, rstd_k)):
        checks.tensor(name, x, (torch.float32,), ndim=2)
        if tuple(x.shape) != (t, hc):
            raise ValueError(f"{name} must have shape [num_tokens, hc_mult] = [{t}, {hc}] (the forward's saved "
                             f"tensor), got {tuple(x.shape)}")
        checks.contiguous(name, x)
        checks.same_device(name, x, "hidden_states", hidden_states)
    checks.contiguous("grad_out", grad_out)
    checks.same_device("grad_out", grad_out, "hidden_states", hidden_states)
    checks.float_arg("clamp_value", clamp_value)
    if device:
        check_device(("grad_out", grad_out), ("hidden_states", hidden_states), ("kv", kv),
                     ("weight_fused", weight_fused))
    return t, hc, h


def _backward(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
              image_token_mask=None):
    t, hc, h = _check(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                      image_token_mask)
    num_partials = config.get_num_sms()
    grad_x = torch.empty_like(hidden_states)
    grad_kv = torch.empty_like(kv)
    grad_w_partial = torch.empty((num_partials, hc, h), dtype=torch.float32, device=hidden_states.device)
    # launched for T = 0 too: every CTA writes its partial row (zeros without tokens)
    values = CONTRACT.key(hc_mult=hc, has_image_token_mask=image_token_mask is not None)
    ptr = lambda x: x.data_ptr() if x is not None and x.numel() else 0  # noqa: E731
    launch(CONTRACT, values, hidden_states.device,
           grad_out=ptr(grad_out), hidden_states=ptr(hidden_states), kv=ptr(kv), weight_fused=ptr(weight_fused),
           dot_in=ptr(dot), gate_in=ptr(gate_score), rstd_x_in=ptr(rstd_x), rstd_k_in=ptr(rstd_k),
           image_token_mask=ptr(image_token_mask), grad_x=ptr(grad_x), grad_kv=ptr(grad_kv),
           grad_w_partial=grad_w_partial.data_ptr(), num_tokens=t, num_groups=h // GATE_ALIGN, scalar=h ** -0.5,
           clamp_value=float(clamp_value), num_partials=num_partials)
    return grad_x, grad_kv, grad_w_partial


@library_op("engram_gate_bwd")
def _engram_gate_bwd_op(grad_out: torch.Tensor, hidden_states: torch.Tensor, kv: torch.Tensor,
                        weight_fused: torch.Tensor, dot: torch.Tensor, gate_score: torch.Tensor,
                        rstd_x: torch.Tensor, rstd_k: torch.Tensor, clamp_value: float,
                        image_token_mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                     image_token_mask)


@_engram_gate_bwd_op.register_fake
def _engram_gate_bwd_fake(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                          image_token_mask):
    t, hc, h = _check(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                      image_token_mask, device=False)
    return (torch.empty_like(hidden_states), torch.empty_like(kv),
            hidden_states.new_empty((config.get_num_sms(), hc, h), dtype=torch.float32))


def engram_gate_bwd(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                    image_token_mask=None):
    """Engram gate backward: ``(grad_x [T, hc, H] bf16, grad_kv [T, hc+1, H] bf16, grad_w_partial [P, hc, H] fp32)``.

    Same signature and results as tile_kernels 2.1 ``engram.engram_gate_bwd`` (hc 4): the forward's inputs and its
    saved ``dot, gate_score, rstd_x, rstd_k`` ``[T, hc]`` fp32; P = ``config.get_num_sms()``. Row p of the partials
    holds the weight-gradient sum of CTA p's tokens (zeros for T = 0); ``grad_w_reduce`` finishes it. Image tokens
    get ``grad_x = grad_out`` and ``grad_kv = 0``. Under ``torch.compile`` the call goes through
    ``kernelkiln::engram_gate_bwd``.
    """
    if torch.compiler.is_compiling():
        return _engram_gate_bwd_op(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k,
                                   clamp_value, image_token_mask)
    return _backward(grad_out, hidden_states, kv, weight_fused, dot, gate_score, rstd_x, rstd_k, clamp_value,
                     image_token_mask)
