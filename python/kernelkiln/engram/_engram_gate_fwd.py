"""engram_gate_fwd (tile_kernels 2.1 ``engram.engram_gate_fwd``): the Engram gate forward.

Spec: kernelkiln_contract.engram_gate.ENGRAM_GATE_FWD (docs/spec/). The in-place form mutates hidden_states, which
a torch.library op must declare, so it is a second op (``engram_gate_fwd_inplace``, returns nothing); the public
function returns hidden_states as the output then, as the peer does. Without save_for_backward the op returns four
empty tensors where the public function returns None.
"""
from typing import Optional

import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.engram_gate import ENGRAM_GATE_FWD as CONTRACT
from kernelkiln_contract.engram_gate import GATE_ALIGN, GATE_FWD_HC, GATE_MIN_HIDDEN, gate_fwd_num_blocks

__all__ = ["engram_gate_fwd"]


def check_gate_inputs(hidden_states, kv, weight_fused, image_token_mask, hc_values, x_name="hidden_states"):
    """(T, hc, H) of the gate's common inputs; raises naming the argument. Shared with the backward."""
    checks.tensor(x_name, hidden_states, (torch.bfloat16,), ndim=3)
    t, hc, h = hidden_states.shape
    if hc not in hc_values:
        raise ValueError(f"{x_name}.shape[1] (hc_mult) must be one of {list(hc_values)}, got {hc}")
    if h % GATE_ALIGN or h < GATE_MIN_HIDDEN:
        raise ValueError(f"{x_name}.shape[2] (hidden_size) must be a multiple of {GATE_ALIGN} and at least "
                         f"{GATE_MIN_HIDDEN}, got {h}")
    checks.tensor("kv", kv, (torch.bfloat16,), ndim=3)
    if tuple(kv.shape) != (t, hc + 1, h):
        raise ValueError(f"kv must have shape [num_tokens, hc_mult + 1, hidden_size] = [{t}, {hc + 1}, {h}], got "
                         f"{tuple(kv.shape)}")
    checks.tensor("weight_fused", weight_fused, (torch.float32,), ndim=2)
    if tuple(weight_fused.shape) != (hc, h):
        raise ValueError(f"weight_fused must have shape [hc_mult, hidden_size] = [{hc}, {h}], got "
                         f"{tuple(weight_fused.shape)}")
    if image_token_mask is not None:
        checks.tensor("image_token_mask", image_token_mask, (torch.bool,), ndim=1)
        if image_token_mask.shape[0] != t:
            raise ValueError(f"image_token_mask must have shape [num_tokens] = [{t}], got "
                             f"{tuple(image_token_mask.shape)}")
    for name, x in ((x_name, hidden_states), ("kv", kv), ("weight_fused", weight_fused),
                    ("image_token_mask", image_token_mask)):
        if x is not None:
            checks.contiguous(name, x)
            checks.same_device(name, x, x_name, hidden_states)
    return t, hc, h


def check_device(*named):
    """Addresses and the device, after every shape and option check (fake tensors cannot answer these)."""
    for name, x in named:
        if x is not None and x.numel():
            checks.aligned(name, x, 16)
    checks.cuda(named[0][0], named[0][1])


def _check(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward, image_token_mask, inplace,
           device=True):
    t, hc, h = check_gate_inputs(hidden_states, kv, weight_fused, image_token_mask, GATE_FWD_HC)
    checks.float_arg("eps", eps)
    checks.float_arg("clamp_value", clamp_value)
    checks.flag("save_for_backward", save_for_backward)
    checks.flag("inplace", inplace)
    if inplace and save_for_backward:
        raise ValueError("inplace=True overwrites hidden_states, which the backward reads: pass "
                         "save_for_backward=False with inplace=True")
    if device:
        check_device(("hidden_states", hidden_states), ("kv", kv), ("weight_fused", weight_fused))
    return t, hc, h


def _launch(hidden_states, kv, weight_fused, eps, clamp_value, image_token_mask, output, saved):
    t, hc, h = hidden_states.shape
    if t == 0:
        return
    inplace = output is hidden_states
    values = CONTRACT.key(hc_mult=hc, save_for_backward=saved is not None,
                          has_image_token_mask=image_token_mask is not None, inplace=inplace)
    dot, gate, rx, rk = saved if saved is not None else (None,) * 4
    ptr = lambda x: 0 if x is None else x.data_ptr()  # noqa: E731
    launch(CONTRACT, values, hidden_states.device,
           hidden_states=hidden_states.data_ptr(), kv=kv.data_ptr(), weight_fused=weight_fused.data_ptr(),
           image_token_mask=ptr(image_token_mask), output=output.data_ptr(), dot_out=ptr(dot),
           gate_score=ptr(gate), rstd_x=ptr(rx), rstd_k=ptr(rk), num_tokens=t, num_groups=h // GATE_ALIGN,
           eps=float(eps), clamp_value=float(clamp_value), scalar=h ** -0.5,
           num_blocks=gate_fwd_num_blocks(config.get_num_sms(), hc))


def _saved_like(hidden_states, t, hc):
    return tuple(torch.empty((t, hc), dtype=torch.float32, device=hidden_states.device) for _ in range(4))


def _forward(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward=True, image_token_mask=None,
             inplace=False):
    t, hc, _ = _check(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward, image_token_mask, inplace)
    output = hidden_states if inplace else torch.empty_like(hidden_states)
    saved = _saved_like(hidden_states, t, hc) if save_for_backward else None
    _launch(hidden_states, kv, weight_fused, eps, clamp_value, image_token_mask, output, saved)
    return (output,) + (saved if saved is not None else (None,) * 4)


@library_op("engram_gate_fwd")
def _engram_gate_fwd_op(hidden_states: torch.Tensor, kv: torch.Tensor, weight_fused: torch.Tensor, eps: float,
                        clamp_value: float, save_for_backward: bool, image_token_mask: Optional[torch.Tensor]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    out = _forward(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward, image_token_mask)
    if save_for_backward:
        return out
    empty = [hidden_states.new_empty((0,), dtype=torch.float32) for _ in range(4)]
    return (out[0], *empty)


@_engram_gate_fwd_op.register_fake
def _engram_gate_fwd_fake(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward, image_token_mask):
    t, hc, _ = _check(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward, image_token_mask, False,
                      device=False)
    shape = (t, hc) if save_for_backward else (0,)
    return (torch.empty_like(hidden_states),
            *(hidden_states.new_empty(shape, dtype=torch.float32) for _ in range(4)))


@library_op("engram_gate_fwd_inplace", mutates_args=("hidden_states",))
def _engram_gate_fwd_inplace_op(hidden_states: torch.Tensor, kv: torch.Tensor, weight_fused: torch.Tensor,
                                eps: float, clamp_value: float, image_token_mask: Optional[torch.Tensor]) -> None:
    _forward(hidden_states, kv, weight_fused, eps, clamp_value, False, image_token_mask, True)


@_engram_gate_fwd_inplace_op.register_fake
def _engram_gate_fwd_inplace_fake(hidden_states, kv, weight_fused, eps, clamp_value, image_token_mask):
    _check(hidden_states, kv, weight_fused, eps, clamp_value, False, image_token_mask, True, device=False)
    return None


def engram_gate_fwd(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward=True, image_token_mask=None,
                    inplace=False):
    """Engram gate forward: ``(output, dot, gate_score, rstd_x, rstd_k)``.

    Same signature and results as tile_kernels 2.1 ``engram.engram_gate_fwd``: hidden_states ``[T, hc, H]`` bf16,
    kv ``[T, hc+1, H]`` bf16 (keys, then the shared value), weight_fused ``[hc, H]`` fp32 (``fused_weight``),
    H a multiple of 256 from 512; output ``[T, hc, H]`` bf16 (hidden_states itself with ``inplace=True``, which
    needs ``save_for_backward=False``); dot (the raw weighted dot), gate_score, rstd_x, rstd_k ``[T, hc]`` fp32, or
    None without save_for_backward. Image tokens (``image_token_mask`` True) pass through unchanged and leave their
    saved rows unwritten. Under ``torch.compile`` the call goes through ``kernelkiln::engram_gate_fwd`` (or
    ``kernelkiln::engram_gate_fwd_inplace``).
    """
    if torch.compiler.is_compiling():
        if isinstance(inplace, bool) and inplace:
            if save_for_backward is True:
                raise ValueError("inplace=True overwrites hidden_states, which the backward reads: pass "
                                 "save_for_backward=False with inplace=True")
            _engram_gate_fwd_inplace_op(hidden_states, kv, weight_fused, eps, clamp_value, image_token_mask)
            return hidden_states, None, None, None, None
        checks.flag("inplace", inplace)
        out = _engram_gate_fwd_op(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward,
                                  image_token_mask)
        return tuple(out) if save_for_backward else (out[0], None, None, None, None)
    return _forward(hidden_states, kv, weight_fused, eps, clamp_value, save_for_backward, image_token_mask, inplace)
