"""``mhc_pre_apply_mix``: a sublayer's input ``Σ_s mix[s] · x[s]`` from the residual streams ``x [..., m, H]`` bf16
and a mix ``[..., m, 1]`` fp32 (kernelkiln.mhc.mhc_pre_apply_mix_fwd / _bwd).

The backward follows tile_kernels 1.0.0's residual-gradient protocol (modeling.mhc.ops._common): when mhc_post's
backward has left its ``d_residual`` on x's storage (``grad_from_mhc_post``), x's gradient is added into that buffer
in place and None is returned for x; otherwise it goes into fresh zeros, which are returned.
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import mhc_pre_apply_mix_bwd, mhc_pre_apply_mix_fwd
from kernelkiln.modeling.mhc.ops._common import compiling, fused_buffer, optional_out, rows, streams

__all__ = ["MHCPreApplyMix", "mhc_pre_apply_mix"]


def _check(x, mix, out=None):
    """(n, m, H); raises naming the argument."""
    m, h = streams("x", x)
    checks.contiguous("x", x)
    checks.tensor("mix", mix, (torch.float32,))
    n = rows(x, 2)
    if mix.dim() < 2 or mix.shape[-1] != 1 or mix.shape[-2] != m or mix.numel() != n * m:
        raise ValueError(f"mix must be [..., mhc_mult, 1] with x's {n} tokens and mhc_mult = {m} (x is "
                         f"{list(x.shape)}), got {list(mix.shape)}")
    checks.same_device("mix", mix, "x", x)
    optional_out(out, (*x.shape[:-2], h), "x", x)
    return n, m, h


def _forward(x, mix, out):
    n, m, h = _check(x, mix, out)
    if out is None:
        out = torch.empty((*x.shape[:-2], h), dtype=torch.bfloat16, device=x.device)
    mhc_pre_apply_mix_fwd(x.view(n, m, h), mix.contiguous().view(n, m), out.view(n, h))
    return out


def _mix_grad(o_grad, x, mix, x_grad):
    """mix's gradient, with x's added into ``x_grad`` (x's shape) in place."""
    n, m, h = rows(x, 2), x.shape[-2], x.shape[-1]
    mix_grad = mhc_pre_apply_mix_bwd(o_grad.contiguous().view(n, h), x.view(n, m, h), mix.contiguous().view(n, m),
                                     x_grad.view(n, m, h))
    return mix_grad.view(mix.shape)


class MHCPreApplyMix(torch.autograd.Function):
    """tile_kernels 1.0.0's Function; see the module doc for its backward's protocol."""

    @staticmethod
    def forward(ctx, x, mix, out):
        out = _forward(x, mix, out)
        ctx.save_for_backward(x, mix)
        return out

    @staticmethod
    def backward(ctx, o_grad):
        x, mix = ctx.saved_tensors
        buffer = fused_buffer(x)
        if buffer is not None:
            return None, _mix_grad(o_grad, x, mix, buffer), None
        x_grad = torch.zeros_like(x, memory_format=torch.contiguous_format)
        return x_grad, _mix_grad(o_grad, x, mix, x_grad), None


@library_op("mhc_layer_pre_apply_mix")
def _apply_op(x: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    return _forward(x, mix, None)


@_apply_op.register_fake
def _apply_fake(x, mix):
    _, _, h = _check(x, mix)
    return x.new_empty((*x.shape[:-2], h))


@library_op("mhc_layer_pre_apply_mix_backward")
def _apply_backward_op(o_grad: torch.Tensor, x: torch.Tensor, mix: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    x_grad = torch.zeros_like(x, memory_format=torch.contiguous_format)
    return x_grad, _mix_grad(o_grad, x, mix, x_grad)


@_apply_backward_op.register_fake
def _apply_backward_fake(o_grad, x, mix):
    _, _, h = _check(x, mix)
    checks.tensor("o_grad", o_grad, (torch.bfloat16,))
    if tuple(o_grad.shape) != (*x.shape[:-2], h):
        raise ValueError(f"o_grad must have shape {[*x.shape[:-2], h]}, got {list(o_grad.shape)}")
    return x.new_empty(x.shape), mix.new_empty(mix.shape)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward_formula(ctx, o_grad):
    return _apply_backward_op(o_grad, *ctx.saved_tensors)


_apply_op.register_autograd(_backward_formula, setup_context=_setup_context)


def mhc_pre_apply_mix(x: torch.Tensor, mix: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``out [..., H] = bf16(Σ_s mix[..., s, 0] · x[..., s, :])`` for ``x [..., m, H]`` bf16 (contiguous) and
    ``mix [..., m, 1]`` fp32, into ``out`` when given (and returned); differentiable. As tile_kernels 1.0.0
    ``modeling.mhc.ops.mhc_pre_apply_mix``. Under torch.compile the op ``kernelkiln::mhc_layer_pre_apply_mix``,
    whose backward always returns x's gradient (a traced graph cannot see the storage attribute)."""
    if compiling():
        result = _apply_op(x, mix)
        if out is None:
            return result
        out.copy_(result)
        return out
    return MHCPreApplyMix.apply(x, mix, out)
