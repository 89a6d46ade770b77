"""``mhc_head_compute_mix``: the LM head's stream mix ``sigmoid(input_mix · scale + base) + eps`` and its gradients
(kernelkiln.mhc.mhc_head_compute_mix_fwd / _bwd; the per-CTA partials of the scale and base gradients are added
with ``sum(0)``, as tile_kernels 1.0.0's caller does)."""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import mhc_head_compute_mix_bwd, mhc_head_compute_mix_fwd
from kernelkiln.modeling.mhc.ops._common import compiling, shaped

__all__ = ["MHCHeadComputeMix", "mhc_head_compute_mix"]
_TOKEN_BLOCK = 32  # the peer's value; it changes nothing in our kernels' results


def _check(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    checks.tensor("input_mix", input_mix, (torch.float32,), ndim=3)
    m = input_mix.shape[-1]
    shaped("mhc_scale", mhc_scale, torch.float32, (1,), "[1]")
    shaped("mhc_base", mhc_base, torch.float32, (m,), "[mhc_mult]")
    checks.float_arg("mhc_pre_eps", mhc_pre_eps)
    return m


def _forward(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    m = _check(input_mix, mhc_scale, mhc_base, mhc_pre_eps)
    x = input_mix.contiguous()
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    mhc_head_compute_mix_fwd(x.view(-1, m), mhc_scale.contiguous(), mhc_base.contiguous(), out.view(-1, m),
                             mhc_pre_eps, token_block_size=_TOKEN_BLOCK)
    return out


def _backward(output_mix_grad, input_mix, mhc_scale, mhc_base):
    m = input_mix.shape[-1]
    x = input_mix.contiguous()
    num_sms = config.get_num_sms()
    input_mix_grad = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    scale_partial = torch.empty((num_sms, 1), dtype=torch.float32, device=x.device)
    base_partial = torch.empty((num_sms, m), dtype=torch.float32, device=x.device)
    mhc_head_compute_mix_bwd(output_mix_grad.contiguous().view(-1, m), x.view(-1, m), mhc_scale.contiguous(),
                             mhc_base.contiguous(), input_mix_grad.view(-1, m), scale_partial, base_partial, num_sms,
                             token_block_size=_TOKEN_BLOCK)
    return input_mix_grad, scale_partial.sum(0), base_partial.sum(0)


class MHCHeadComputeMix(torch.autograd.Function):
    """tile_kernels 1.0.0's Function: ``input_mix [a, b, m]`` fp32, ``mhc_scale [1]``, ``mhc_base [m]``."""

    @staticmethod
    def forward(ctx, input_mix, mhc_scale, mhc_base, mhc_pre_eps):
        out = _forward(input_mix, mhc_scale, mhc_base, mhc_pre_eps)
        ctx.save_for_backward(input_mix, mhc_scale, mhc_base)
        return out

    @staticmethod
    def backward(ctx, output_mix_grad):
        return (*_backward(output_mix_grad, *ctx.saved_tensors), None)


@library_op("mhc_layer_head_compute_mix")
def _mix_op(input_mix: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
            mhc_pre_eps: float) -> torch.Tensor:
    return _forward(input_mix, mhc_scale, mhc_base, mhc_pre_eps)


@_mix_op.register_fake
def _mix_fake(input_mix, mhc_scale, mhc_base, mhc_pre_eps):
    _check(input_mix, mhc_scale, mhc_base, mhc_pre_eps)
    return input_mix.new_empty(input_mix.shape)


@library_op("mhc_layer_head_compute_mix_backward")
def _mix_backward_op(output_mix_grad: torch.Tensor, input_mix: torch.Tensor, mhc_scale: torch.Tensor,
                     mhc_base: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(output_mix_grad, input_mix, mhc_scale, mhc_base)


@_mix_backward_op.register_fake
def _mix_backward_fake(output_mix_grad, input_mix, mhc_scale, mhc_base):
    _check(input_mix, mhc_scale, mhc_base, 0.0)
    shaped("output_mix_grad", output_mix_grad, torch.float32, input_mix.shape, "input_mix's shape")
    return input_mix.new_empty(input_mix.shape), mhc_scale.new_empty((1,)), mhc_base.new_empty(mhc_base.shape)


def _setup_context(ctx, inputs, output):
    input_mix, mhc_scale, mhc_base, _ = inputs
    ctx.save_for_backward(input_mix, mhc_scale, mhc_base)


def _backward_formula(ctx, output_mix_grad):
    return (*_mix_backward_op(output_mix_grad, *ctx.saved_tensors), None)


_mix_op.register_autograd(_backward_formula, setup_context=_setup_context)


def mhc_head_compute_mix(input_mix: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
                         mhc_pre_eps: float) -> torch.Tensor:
    """``sigmoid(input_mix · mhc_scale + mhc_base) + mhc_pre_eps`` for ``input_mix [a, b, m]`` fp32, ``mhc_scale
    [1]``, ``mhc_base [m]``; differentiable in the three tensors. As tile_kernels 1.0.0
    ``modeling.mhc.ops.mhc_head_compute_mix``; under torch.compile the op ``kernelkiln::mhc_layer_head_compute_mix``."""
    if compiling():
        return _mix_op(input_mix, mhc_scale, mhc_base, mhc_pre_eps)
    return MHCHeadComputeMix.apply(input_mix, mhc_scale, mhc_base, mhc_pre_eps)
