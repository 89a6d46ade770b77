"""``expand_to_mhc``: the hidden state ``[..., H]`` copied into mhc_mult residual streams ``[..., m, H]``; its
gradient is the sum of the streams' gradients (kernelkiln.mhc.expand_to_mhc_fwd / _bwd)."""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import expand_to_mhc_bwd, expand_to_mhc_fwd
from kernelkiln.modeling.mhc.ops._common import compiling, optional_out, rows

__all__ = ["ExpandToMHCFn", "expand_to_mhc"]


def _check(hidden, mhc_mult, out=None):
    """The output shape ``[..., mhc_mult, H]``; raises naming the argument."""
    checks.tensor("hidden", hidden, (torch.bfloat16,))
    if hidden.dim() < 1:
        raise ValueError("hidden must be [..., hidden_size], got a 0-D tensor")
    checks.int_arg("mhc_mult", mhc_mult)
    if mhc_mult < 1:
        raise ValueError(f"mhc_mult must be >= 1, got {mhc_mult}")
    checks.contiguous("hidden", hidden)
    shape = (*hidden.shape[:-1], mhc_mult, hidden.shape[-1])
    optional_out(out, shape, "hidden", hidden)
    return shape


def _forward(hidden, mhc_mult, out):
    shape = _check(hidden, mhc_mult, out)
    if out is None:
        out = hidden.new_empty(shape)
    n, h = rows(hidden, 1), hidden.shape[-1]
    expand_to_mhc_fwd(hidden.view(n, h), out.view(n, mhc_mult, h))
    return out


def _backward(out_grad):
    g = out_grad.contiguous()
    n, (m, h) = rows(g, 2), g.shape[-2:]
    hidden_grad = g.new_empty((*g.shape[:-2], h))
    expand_to_mhc_bwd(g.view(n, m, h), hidden_grad.view(n, h))
    return hidden_grad


class ExpandToMHCFn(torch.autograd.Function):
    """tile_kernels 1.0.0's Function: forward the expansion (into ``out`` when given), backward the stream sum."""

    @staticmethod
    def forward(ctx, hidden, mhc_mult, out):
        return _forward(hidden, mhc_mult, out)

    @staticmethod
    def backward(ctx, out_grad):
        return _backward(out_grad), None, None


@library_op("mhc_layer_expand")
def _expand_op(hidden: torch.Tensor, mhc_mult: int) -> torch.Tensor:
    return _forward(hidden, mhc_mult, None)


@_expand_op.register_fake
def _expand_fake(hidden, mhc_mult):
    return hidden.new_empty(_check(hidden, mhc_mult))


@library_op("mhc_layer_expand_backward")
def _expand_backward_op(out_grad: torch.Tensor) -> torch.Tensor:
    return _backward(out_grad)


@_expand_backward_op.register_fake
def _expand_backward_fake(out_grad):
    checks.tensor("out_grad", out_grad, (torch.bfloat16,))
    return out_grad.new_empty((*out_grad.shape[:-2], out_grad.shape[-1]))


def _setup_context(ctx, inputs, output):
    pass


def _backward_formula(ctx, out_grad):
    return _expand_backward_op(out_grad), None


_expand_op.register_autograd(_backward_formula, setup_context=_setup_context)


def expand_to_mhc(hidden: torch.Tensor, mhc_mult: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``hidden [..., H]`` bf16 (contiguous) repeated into ``[..., mhc_mult, H]``, written into ``out`` when given
    (and returned); differentiable. As tile_kernels 1.0.0 ``modeling.mhc.ops.expand_to_mhc``. Under torch.compile
    the registered ``kernelkiln::mhc_layer_expand`` op (a given ``out`` is filled by a copy)."""
    if compiling():
        result = _expand_op(hidden, mhc_mult)
        if out is None:
            return result
        out.copy_(result)
        return out
    return ExpandToMHCFn.apply(hidden, mhc_mult, out)
