"""``mhc_post``: the block's new residual streams ``post[o] · x + Σ_i comb[i, o] · residual[i]``
(kernelkiln.mhc.mhc_post_fwd / mhc_post_bwd), and tile_kernels 1.0.0's plain ``mhc_post_fwd`` / ``mhc_post_bwd``.

``mhc_post_bwd(..., fuse_grad_acc=True)`` starts the residual-gradient protocol (modeling.mhc.ops._common): it
hangs its fresh ``d_residual`` on the residual's storage as ``grad_from_mhc_post`` for the residual's other
consumers (mhc_pre_apply_mix, mhc_pre_norm_fn) to add into. MHCPost's backward calls it that way.
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import mhc_post_bwd as _post_bwd_21
from kernelkiln.mhc import mhc_post_fwd
from kernelkiln.modeling.mhc.ops._common import compiling, set_fused_buffer

__all__ = ["MHCPost", "mhc_post", "mhc_post_fwd", "mhc_post_bwd"]


def mhc_post_bwd(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor,
                 d_o: torch.Tensor, fuse_grad_acc: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(d_x, d_residual, d_post_layer_mix, d_comb_res_mix)`` of ``mhc_post_fwd`` for ``d_o [B, S, m, H]`` bf16,
    new tensors shaped like the inputs. With ``fuse_grad_acc`` (the default) ``d_residual`` is also hung on
    ``residual.untyped_storage()`` as ``grad_from_mhc_post`` (not under torch.compile, where the storage is not
    visible). As tile_kernels 1.0.0 ``modeling.mhc.ops.mhc_post_bwd``."""
    checks.flag("fuse_grad_acc", fuse_grad_acc)
    d_x, d_residual, d_post, d_comb = _post_bwd_21(x, residual, post_layer_mix, comb_res_mix, d_o)
    if fuse_grad_acc and not compiling():
        set_fused_buffer(residual, d_residual)
    return d_x, d_residual, d_post, d_comb


class MHCPost(torch.autograd.Function):
    """tile_kernels 1.0.0's Function: forward ``mhc_post_fwd``, backward ``mhc_post_bwd(..., fuse_grad_acc=True)``."""

    @staticmethod
    def forward(ctx, x, residual, post_layer_mix, comb_res_mix, out):
        # the forward reads a contiguous copy of a strided residual; the backward needs the same (a contiguous
        # residual is itself, so the storage attribute lands on the caller's storage)
        residual = residual.contiguous()
        out = mhc_post_fwd(x, residual, post_layer_mix, comb_res_mix, out)
        ctx.save_for_backward(x, residual, post_layer_mix, comb_res_mix)
        return out

    @staticmethod
    def backward(ctx, d_o):
        return (*mhc_post_bwd(*ctx.saved_tensors, d_o), None)


@library_op("mhc_layer_post")
def _post_op(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
             comb_res_mix: torch.Tensor) -> torch.Tensor:
    return mhc_post_fwd(x, residual, post_layer_mix, comb_res_mix)


def _check(x, residual, post_layer_mix, comb_res_mix):
    from kernelkiln.mhc._mhc_post_fwd import check_post_inputs
    check_post_inputs(x, residual, post_layer_mix, comb_res_mix)


@_post_op.register_fake
def _post_fake(x, residual, post_layer_mix, comb_res_mix):
    _check(x, residual.contiguous(), post_layer_mix, comb_res_mix)
    return residual.new_empty(residual.shape)


@library_op("mhc_layer_post_backward")
def _post_backward_op(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                      comb_res_mix: torch.Tensor, d_o: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _post_bwd_21(x, residual.contiguous(), post_layer_mix, comb_res_mix, d_o)


@_post_backward_op.register_fake
def _post_backward_fake(x, residual, post_layer_mix, comb_res_mix, d_o):
    _check(x, residual.contiguous(), post_layer_mix, comb_res_mix)
    if tuple(d_o.shape) != tuple(residual.shape):
        raise ValueError(f"d_o must have residual's shape {tuple(residual.shape)}, got {tuple(d_o.shape)}")
    return tuple(t.new_empty(t.shape) for t in (x, residual, post_layer_mix, comb_res_mix))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward_formula(ctx, d_o):
    return _post_backward_op(*ctx.saved_tensors, d_o)


_post_op.register_autograd(_backward_formula, setup_context=_setup_context)


def mhc_post(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor,
             out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The new residual ``[B, S, m, H]`` bf16 from the sublayer output ``x [B, S, H]`` bf16, the old ``residual``
    and the mixes ``post_layer_mix [B, S, m, 1]``, ``comb_res_mix [B, S, m, m]`` fp32, into ``out`` when given;
    differentiable. As tile_kernels 1.0.0 ``modeling.mhc.ops.mhc_post``: its backward hangs d_residual on the
    residual's storage (``grad_from_mhc_post``). Under torch.compile the op ``kernelkiln::mhc_layer_post``, whose
    backward only returns d_residual."""
    if compiling():
        result = _post_op(x, residual, post_layer_mix, comb_res_mix)
        if out is None:
            return result
        out.copy_(result)
        return out
    return MHCPost.apply(x, residual, post_layer_mix, comb_res_mix, out)
