"""``sinkhorn_normalize``: the comb mix's Sinkhorn normalization and its gradient (kernelkiln.mhc.mhc_sinkhorn_fwd /
_bwd; the backward recomputes the forward from the saved logits). tile_kernels 1.0.0 ran its forward with one
matrix per block and its backward with 32; our kernels' results do not depend on that tiling."""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import mhc_sinkhorn_bwd, mhc_sinkhorn_fwd
from kernelkiln.modeling.mhc.ops._common import compiling

__all__ = ["_SinkhornNormalize", "sinkhorn_normalize"]


def _check(x, repeat, eps):
    checks.tensor("x", x, (torch.float32,))
    if x.dim() < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"x must be [..., m, m] (square matrices), got shape {tuple(x.shape)}")
    checks.int_arg("repeat", repeat)
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    checks.float_arg("eps", eps)


def _forward(x, repeat, eps):
    _check(x, repeat, eps)
    x = x.contiguous()
    output = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    mhc_sinkhorn_fwd(x, output, repeat, eps)
    return output


def _backward(grad_output, x, repeat, eps):
    grad_input = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    mhc_sinkhorn_bwd(grad_output.contiguous(), x.contiguous(), grad_input, repeat, eps)
    return grad_input


class _SinkhornNormalize(torch.autograd.Function):
    """tile_kernels 1.0.0's Function over ``[n, m, m]`` fp32 logits."""

    @staticmethod
    def forward(ctx, x, repeat, eps):
        output = _forward(x, repeat, eps)
        ctx.save_for_backward(x)
        ctx.repeat, ctx.eps = repeat, eps
        return output

    @staticmethod
    def backward(ctx, grad_output):
        return _backward(grad_output, ctx.saved_tensors[0], ctx.repeat, ctx.eps), None, None


@library_op("mhc_layer_sinkhorn")
def _sinkhorn_op(x: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    return _forward(x, repeat, eps)


@_sinkhorn_op.register_fake
def _sinkhorn_fake(x, repeat, eps):
    _check(x, repeat, eps)
    return x.new_empty(x.shape)


@library_op("mhc_layer_sinkhorn_backward")
def _sinkhorn_backward_op(grad_output: torch.Tensor, x: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    return _backward(grad_output, x, repeat, eps)


@_sinkhorn_backward_op.register_fake
def _sinkhorn_backward_fake(grad_output, x, repeat, eps):
    _check(x, repeat, eps)
    if tuple(grad_output.shape) != tuple(x.shape):
        raise ValueError(f"grad_output must have x's shape {tuple(x.shape)}, got {tuple(grad_output.shape)}")
    return x.new_empty(x.shape)


def _setup_context(ctx, inputs, output):
    x, repeat, eps = inputs
    ctx.save_for_backward(x)
    ctx.repeat, ctx.eps = repeat, eps


def _backward_formula(ctx, grad_output):
    return _sinkhorn_backward_op(grad_output, ctx.saved_tensors[0], ctx.repeat, ctx.eps), None, None


_sinkhorn_op.register_autograd(_backward_formula, setup_context=_setup_context)


def sinkhorn_normalize(x: torch.Tensor, repeat: int = 10, eps: float = 1e-6) -> torch.Tensor:
    """Sinkhorn-normalize the ``[..., m, m]`` fp32 logits ``x`` (row softmax + eps, a column normalization, then
    repeat - 1 rounds of row and column normalizations, each a division by sum + eps); differentiable. As
    tile_kernels 1.0.0 ``modeling.mhc.ops.sinkhorn_normalize``; under torch.compile the op
    ``kernelkiln::mhc_layer_sinkhorn``."""
    _check(x, repeat, eps)
    flat = x.contiguous().view(-1, *x.shape[-2:])
    if compiling():
        return _sinkhorn_op(flat, repeat, eps).view(x.shape)
    return _SinkhornNormalize.apply(flat, repeat, eps).view(x.shape)
