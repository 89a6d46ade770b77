"""``mhc_pre_split_mixes``: a block's pre, post and comb mixes from its m(m+2) normalized logits, in tile_kernels
1.0.0's shapes (pre and post ``[a, b, m, 1]``, comb ``[a, b, m, m]``), over kernelkiln.mhc.mhc_pre_split_mixes_fwd /
_bwd. The backward's per-CTA partials of the scale and base gradients are added by the 2.1 op's reduce kernel (in a
fixed order) where 1.0.0's caller used ``sum(0)``; 1.0.0 also read the parameters' ``main_grad`` without using it,
which is not repeated here."""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import mhc_pre_split_mixes_bwd, mhc_pre_split_mixes_fwd
from kernelkiln.modeling.mhc.ops._common import compiling, grads_or_zeros, shaped

__all__ = ["MHCPreSplitMixes", "mhc_pre_split_mixes"]


def _check(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    checks.tensor("input_mixes", input_mixes, (torch.float32,), ndim=3)
    checks.int_arg("mhc_mult", mhc_mult)
    if mhc_mult < 1:
        raise ValueError(f"mhc_mult must be >= 1, got {mhc_mult}")
    m3 = mhc_mult * (mhc_mult + 2)
    if input_mixes.shape[-1] != m3:
        raise ValueError(f"input_mixes must be [a, b, mhc_mult·(mhc_mult+2)] = [a, b, {m3}], got "
                         f"{list(input_mixes.shape)}")
    shaped("mhc_scale", mhc_scale, torch.float32, (3,), "[3]")
    shaped("mhc_base", mhc_base, torch.float32, (m3,), "[mhc_mult·(mhc_mult+2)]")
    checks.float_arg("mhc_post_mult_value", mhc_post_mult_value)
    checks.float_arg("mhc_pre_eps", mhc_pre_eps)
    return m3


def _shapes(input_mixes, m):
    a, b = input_mixes.shape[:2]
    return (a, b, m, 1), (a, b, m, 1), (a, b, m, m)


def _forward(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    m3 = _check(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)
    x = input_mixes.contiguous()
    pre, post, comb = (torch.empty(s, dtype=torch.float32, device=x.device) for s in _shapes(x, mhc_mult))
    n = x.shape[0] * x.shape[1]
    mhc_pre_split_mixes_fwd(x.view(n, m3), mhc_scale.contiguous(), mhc_base.contiguous(), pre.view(n, mhc_mult),
                            post.view(n, mhc_mult), comb.view(n, mhc_mult * mhc_mult), mhc_post_mult_value,
                            mhc_pre_eps)
    return pre, post, comb


def _backward(pre_grad, post_grad, comb_grad, input_mixes, post_layer_mix, mhc_scale, mhc_base, mhc_post_mult_value):
    m = post_layer_mix.shape[-2]
    m3 = input_mixes.shape[-1]
    x = input_mixes.contiguous()
    n = x.shape[0] * x.shape[1]
    input_mixes_grad = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    scale_grad = torch.empty((3,), dtype=torch.float32, device=x.device)
    base_grad = torch.empty((m3,), dtype=torch.float32, device=x.device)
    pre_s, post_s, comb_s = _shapes(x, m)
    pre_grad, post_grad, comb_grad = grads_or_zeros((pre_grad, post_grad, comb_grad), (pre_s, post_s, comb_s),
                                                    x.device)
    mhc_pre_split_mixes_bwd(pre_grad.view(n, m), post_grad.view(n, m), comb_grad.view(n, m * m), x.view(n, m3),
                            post_layer_mix.contiguous().view(n, m), mhc_scale.contiguous(), mhc_base.contiguous(),
                            input_mixes_grad.view(n, m3), scale_grad, base_grad, mhc_post_mult_value)
    return input_mixes_grad, scale_grad, base_grad


class MHCPreSplitMixes(torch.autograd.Function):
    """tile_kernels 1.0.0's Function: ``input_mixes [a, b, m(m+2)]`` fp32 -> (pre, post, comb)."""

    @staticmethod
    def forward(ctx, input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
        pre, post, comb = _forward(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)
        ctx.save_for_backward(input_mixes, post, mhc_scale, mhc_base)
        ctx.mhc_post_mult_value = mhc_post_mult_value
        return pre, post, comb

    @staticmethod
    def backward(ctx, pre_grad, post_grad, comb_grad):
        input_mixes, post, mhc_scale, mhc_base = ctx.saved_tensors
        grads = _backward(pre_grad, post_grad, comb_grad, input_mixes, post, mhc_scale, mhc_base,
                          ctx.mhc_post_mult_value)
        return (*grads, None, None, None)


@library_op("mhc_layer_pre_split_mixes")
def _split_op(input_mixes: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor, mhc_mult: int,
              mhc_post_mult_value: float, mhc_pre_eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)


@_split_op.register_fake
def _split_fake(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps):
    _check(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)
    return tuple(input_mixes.new_empty(s) for s in _shapes(input_mixes, mhc_mult))


@library_op("mhc_layer_pre_split_mixes_backward")
def _split_backward_op(pre_layer_mix_grad: torch.Tensor, post_layer_mix_grad: torch.Tensor,
                       comb_res_mix_grad: torch.Tensor, input_mixes: torch.Tensor, post_layer_mix: torch.Tensor,
                       mhc_scale: torch.Tensor, mhc_base: torch.Tensor, mhc_post_mult_value: float
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix,
                     mhc_scale, mhc_base, mhc_post_mult_value)


@_split_backward_op.register_fake
def _split_backward_fake(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix,
                         mhc_scale, mhc_base, mhc_post_mult_value):
    m = post_layer_mix.shape[-2]
    _check(input_mixes, mhc_scale, mhc_base, m, mhc_post_mult_value, 0.0)
    pre_s, post_s, comb_s = _shapes(input_mixes, m)
    shaped("pre_layer_mix_grad", pre_layer_mix_grad, torch.float32, pre_s, "[a, b, mhc_mult, 1]")
    shaped("post_layer_mix_grad", post_layer_mix_grad, torch.float32, post_s, "[a, b, mhc_mult, 1]")
    shaped("comb_res_mix_grad", comb_res_mix_grad, torch.float32, comb_s, "[a, b, mhc_mult, mhc_mult]")
    return (input_mixes.new_empty(input_mixes.shape), mhc_scale.new_empty((3,)),
            mhc_base.new_empty(mhc_base.shape))


def _setup_context(ctx, inputs, output):
    input_mixes, mhc_scale, mhc_base, _, mhc_post_mult_value, _ = inputs
    ctx.save_for_backward(input_mixes, output[1], mhc_scale, mhc_base)
    ctx.mhc_post_mult_value = mhc_post_mult_value


def _backward_formula(ctx, pre_grad, post_grad, comb_grad):
    input_mixes, post, mhc_scale, mhc_base = ctx.saved_tensors
    m = post.shape[-2]
    pre_grad, post_grad, comb_grad = grads_or_zeros((pre_grad, post_grad, comb_grad),
                                                    _shapes(input_mixes, m), post.device)
    grads = _split_backward_op(pre_grad, post_grad, comb_grad, input_mixes, post, mhc_scale, mhc_base,
                               ctx.mhc_post_mult_value)
    return (*grads, None, None, None)


_split_op.register_autograd(_backward_formula, setup_context=_setup_context)


def mhc_pre_split_mixes(input_mixes: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor, mhc_mult: int,
                        mhc_post_mult_value: float, mhc_pre_eps: float
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(pre [a, b, m, 1], post [a, b, m, 1], comb [a, b, m, m])`` from ``input_mixes [a, b, m(m+2)]`` fp32, the
    column groups scaled by ``mhc_scale [3]`` and shifted by ``mhc_base [m(m+2)]``: pre = sigmoid + pre_eps, post =
    sigmoid · post_mult, comb = the logits; differentiable in the three tensors. As tile_kernels 1.0.0
    ``modeling.mhc.ops.mhc_pre_split_mixes``; under torch.compile the op ``kernelkiln::mhc_layer_pre_split_mixes``."""
    if compiling():
        return _split_op(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)
    return MHCPreSplitMixes.apply(input_mixes, mhc_scale, mhc_base, mhc_mult, mhc_post_mult_value, mhc_pre_eps)
