"""``mhc_pre_norm_fn``: a block's m(m+2) mix logits, the RMS-normalized projection of the flattened residual
streams, ``(x · fn^T) · rsqrt(Σ x² / (m·H) + eps)`` per token; optionally with the RMS-norm weight folded into fn
first (``_MHCFnNormwMerge``).

The projection is tile_kernels 1.0.0's TF32 GEMM, kernelkiln.mhc.mhc_pre_norm_fn_fwd_mul / _bwd_mul, with fn (in
the forward) and the projection's gradient (in the backward) rounded to TF32 by ``round_to_tf32`` first, as 1.0.0
does. 1.0.0 forces one split (its ``n_splits`` only sized a buffer it then cut to one split), so the "reduction"
of kernelkiln.mhc.mhc_reduce_partials_and_rmsnorm_fwd / _bwd runs with S = 1 and G = 1: they are 1.0.0's norm
kernels (sums of one partial from +0, ``r = rsqrt(sq / (m·H) + eps)``, ``out = out_mul · r``; backward
``out_mul_grad = g · r``, ``sqrsum_grad = ((Σ g · out_mul) · r / (sq + eps · m·H)) / -2``).

With ``fuse_grad_acc`` (the default, as 1.0.0) the residual's gradient is added into the ``grad_from_mhc_post``
buffer that mhc_post's backward hung on the residual's storage (modeling.mhc.ops._common), which must be there; the
attribute is removed and None is returned for the residual. Without it the gradient is returned. Under
torch.compile (ops ``kernelkiln::mhc_layer_pre_norm_fn`` and ``kernelkiln::mhc_layer_fn_normw_merge``) the
gradient is always returned, whatever ``fuse_grad_acc`` says, and ``main_grad`` is not used: a traced graph can
neither see a storage attribute nor accumulate into a buffer it does not take as an input.

A weight with a ``main_grad`` attribute (an fp32 buffer, Megatron style) passed with a norm weight gets its
gradient accumulated there and None returned (``_MHCFnNormwMerge``, as 1.0.0); without a norm weight fn's gradient
is always returned.
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc import (mhc_fn_normw_merge_bwd, mhc_fn_normw_merge_fwd, mhc_reduce_partials_and_rmsnorm_bwd,
                            mhc_reduce_partials_and_rmsnorm_fwd)
from kernelkiln.modeling.mhc.ops._common import (GRAD_ATTR, clear_fused_buffer, compiling, fused_buffer, rows,
                                                 shaped, streams)

__all__ = ["_MHCFnNormwMerge", "MHCPreNormFn", "mhc_pre_norm_fn"]


def _tf32():
    from kernelkiln._formats import round_to_tf32  # added beside the GEMM ops; imported at the first call
    return round_to_tf32


def _check(residual, mhc_fn, mhc_norm_eps):
    """(m3, K = m·H) of the projection; raises naming the argument."""
    m, h = streams("residual", residual)
    checks.contiguous("residual", residual)
    checks.tensor("mhc_fn", mhc_fn, (torch.float32,), ndim=2)
    if mhc_fn.shape[1] != m * h:
        raise ValueError(f"mhc_fn must be [mhc_mult3, mhc_mult·hidden_size] = [mhc_mult3, {m * h}] (residual is "
                         f"{list(residual.shape)}), got {list(mhc_fn.shape)}")
    checks.same_device("mhc_fn", mhc_fn, "residual", residual)
    checks.float_arg("mhc_norm_eps", mhc_norm_eps)
    return mhc_fn.shape[0], m * h


def _check_normw(mhc_fn, mhc_norm_weight):
    shaped("mhc_norm_weight", mhc_norm_weight, torch.float32, (mhc_fn.shape[1],), "[mhc_mult·hidden_size]")
    checks.same_device("mhc_norm_weight", mhc_norm_weight, "mhc_fn", mhc_fn)


def pre_norm_fn_mul_fwd(residual, fn):
    """``(fn rounded to TF32, out_mul [1, n, m3], sqrsum [1, n])``: 1.0.0's one-split projection GEMM and Σ x² of
    ``residual [..., m, H]`` (shared with mhc_pre_big_fuse)."""
    from kernelkiln.mhc import mhc_pre_norm_fn_fwd_mul
    m3, k = fn.shape
    n = rows(residual, 2)
    fn_tf32 = _tf32()(fn.contiguous())
    out_mul = torch.empty((1, n, m3), dtype=torch.float32, device=residual.device)
    sqrsum = torch.empty((1, n), dtype=torch.float32, device=residual.device)
    mhc_pre_norm_fn_fwd_mul(residual.view(n, k), fn_tf32, out_mul.view(n, 1, m3), sqrsum.view(n, 1))
    return fn_tf32, out_mul, sqrsum


def _forward(residual, mhc_fn, mhc_norm_eps):
    m3, k = _check(residual, mhc_fn, mhc_norm_eps)
    n = rows(residual, 2)
    fn_tf32, out_mul_split, sqrsum_split = pre_norm_fn_mul_fwd(residual, mhc_fn)
    out_mul = torch.empty((n, 1, m3), dtype=torch.float32, device=residual.device)
    sqrsum = torch.empty((n, 1), dtype=torch.float32, device=residual.device)
    out = torch.empty((*residual.shape[:-2], m3), dtype=torch.float32, device=residual.device)
    mhc_reduce_partials_and_rmsnorm_fwd(out_mul_split.view(1, n, 1, m3), sqrsum_split.view(1, n, 1), out_mul, sqrsum,
                                        out.view(n, m3), k, mhc_norm_eps, 1)
    return out, fn_tf32, out_mul, sqrsum


def _backward(out_grad, residual, fn_tf32, out_mul, sqrsum, mhc_norm_eps, x_grad):
    """fn's gradient, with the residual's added into ``x_grad`` (the residual's shape, bf16) in place."""
    from kernelkiln.mhc import mhc_pre_norm_fn_bwd_mul
    m3, k = fn_tf32.shape
    n = rows(residual, 2)
    out_mul_grad = torch.empty_like(out_mul)
    sqrsum_grad = torch.empty_like(sqrsum)
    mhc_reduce_partials_and_rmsnorm_bwd(out_grad.contiguous().view(n, m3), out_mul, sqrsum, out_mul_grad, sqrsum_grad,
                                        k, mhc_norm_eps)
    fn_grad = torch.empty_like(fn_tf32)
    mhc_pre_norm_fn_bwd_mul(_tf32()(out_mul_grad), sqrsum_grad, residual.view(n, k), fn_tf32, x_grad.view(n, k),
                            fn_grad)
    return fn_grad


class _MHCFnNormwMerge(torch.autograd.Function):
    """tile_kernels 1.0.0's Function: ``fn · normw``; gradients into ``main_grad`` where the tensors have one."""

    @staticmethod
    def forward(ctx, fn, normw):
        ctx.fn_main_grad = getattr(fn, "main_grad", None)
        ctx.normw_main_grad = getattr(normw, "main_grad", None)
        ctx.save_for_backward(fn, normw)
        out_fn = torch.empty(fn.shape, dtype=torch.float32, device=fn.device)
        mhc_fn_normw_merge_fwd(fn, normw, out_fn)
        return out_fn

    @staticmethod
    def backward(ctx, out_fn_grad):
        fn, normw = ctx.saved_tensors
        fn_grad = ctx.fn_main_grad if ctx.fn_main_grad is not None else torch.zeros_like(fn)
        normw_grad = ctx.normw_main_grad if ctx.normw_main_grad is not None else torch.zeros_like(normw)
        mhc_fn_normw_merge_bwd(fn, normw, out_fn_grad.contiguous(), fn_grad, normw_grad)
        return (None if ctx.fn_main_grad is not None else fn_grad,
                None if ctx.normw_main_grad is not None else normw_grad)


class MHCPreNormFn(torch.autograd.Function):
    """tile_kernels 1.0.0's Function ``(x, fn, norm_eps, fuse_grad_acc, n_splits)``; see the module doc."""

    @staticmethod
    def forward(ctx, x, fn, norm_eps, fuse_grad_acc, n_splits):
        out, fn_tf32, out_mul, sqrsum = _forward(x, fn, norm_eps)
        ctx.save_for_backward(x, fn_tf32, out_mul, sqrsum)
        ctx.norm_eps, ctx.fuse_grad_acc = norm_eps, fuse_grad_acc
        return out

    @staticmethod
    def backward(ctx, out_grad):
        x, fn_tf32, out_mul, sqrsum = ctx.saved_tensors
        if not ctx.fuse_grad_acc:
            x_grad = torch.zeros_like(x, memory_format=torch.contiguous_format)
            fn_grad = _backward(out_grad, x, fn_tf32, out_mul, sqrsum, ctx.norm_eps, x_grad)
            return x_grad, fn_grad, None, None, None
        buffer = fused_buffer(x)
        if buffer is None:
            raise RuntimeError(f"mhc_pre_norm_fn(fuse_grad_acc=True): the residual's storage has no {GRAD_ATTR} "
                               "buffer in the backward; it is left there by the backward of mhc_post on the same "
                               "residual (pass fuse_grad_acc=False where no mhc_post consumes it)")
        fn_grad = _backward(out_grad, x, fn_tf32, out_mul, sqrsum, ctx.norm_eps, buffer)
        clear_fused_buffer(x)
        return None, fn_grad, None, None, None


# ------------------------------------------------------------------------------------------ the compile path
@library_op("mhc_layer_fn_normw_merge")
def _merge_op(fn: torch.Tensor, normw: torch.Tensor) -> torch.Tensor:
    out_fn = torch.empty(fn.shape, dtype=torch.float32, device=fn.device)
    mhc_fn_normw_merge_fwd(fn, normw, out_fn)
    return out_fn


@_merge_op.register_fake
def _merge_fake(fn, normw):
    checks.tensor("mhc_fn", fn, (torch.float32,), ndim=2)
    _check_normw(fn, normw)
    return fn.new_empty(fn.shape)


@library_op("mhc_layer_fn_normw_merge_backward")
def _merge_backward_op(fn: torch.Tensor, normw: torch.Tensor, out_fn_grad: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    fn_grad, normw_grad = torch.zeros_like(fn), torch.zeros_like(normw)
    mhc_fn_normw_merge_bwd(fn, normw, out_fn_grad.contiguous(), fn_grad, normw_grad)
    return fn_grad, normw_grad


@_merge_backward_op.register_fake
def _merge_backward_fake(fn, normw, out_fn_grad):
    _merge_fake(fn, normw)
    shaped("out_fn_grad", out_fn_grad, torch.float32, fn.shape, "mhc_fn's shape")
    return fn.new_empty(fn.shape), normw.new_empty(normw.shape)


def _merge_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _merge_backward_formula(ctx, out_fn_grad):
    return _merge_backward_op(*ctx.saved_tensors, out_fn_grad)


_merge_op.register_autograd(_merge_backward_formula, setup_context=_merge_setup_context)


@library_op("mhc_layer_pre_norm_fn")
def _norm_op(residual: torch.Tensor, mhc_fn: torch.Tensor, mhc_norm_eps: float
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward(residual, mhc_fn, mhc_norm_eps)


@_norm_op.register_fake
def _norm_fake(residual, mhc_fn, mhc_norm_eps):
    m3, k = _check(residual, mhc_fn, mhc_norm_eps)
    n = rows(residual, 2)
    return (residual.new_empty((*residual.shape[:-2], m3), dtype=torch.float32), mhc_fn.new_empty((m3, k)),
            mhc_fn.new_empty((n, 1, m3)), mhc_fn.new_empty((n, 1)))


@library_op("mhc_layer_pre_norm_fn_backward")
def _norm_backward_op(out_grad: torch.Tensor, residual: torch.Tensor, fn_tf32: torch.Tensor, out_mul: torch.Tensor,
                      sqrsum: torch.Tensor, mhc_norm_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x_grad = torch.zeros_like(residual, memory_format=torch.contiguous_format)
    return x_grad, _backward(out_grad, residual, fn_tf32, out_mul, sqrsum, mhc_norm_eps, x_grad)


@_norm_backward_op.register_fake
def _norm_backward_fake(out_grad, residual, fn_tf32, out_mul, sqrsum, mhc_norm_eps):
    m3, k = _check(residual, fn_tf32, mhc_norm_eps)
    shaped("out_grad", out_grad, torch.float32, (*residual.shape[:-2], m3), "[..., mhc_mult3]")
    return residual.new_empty(residual.shape), fn_tf32.new_empty((m3, k))


def _norm_setup_context(ctx, inputs, output):
    residual, _, mhc_norm_eps = inputs
    _, fn_tf32, out_mul, sqrsum = output
    ctx.save_for_backward(residual, fn_tf32, out_mul, sqrsum)
    ctx.mhc_norm_eps = mhc_norm_eps


def _norm_backward_formula(ctx, out_grad, *_saved_outputs_grads):
    x_grad, fn_grad = _norm_backward_op(out_grad, *ctx.saved_tensors, ctx.mhc_norm_eps)
    return x_grad, fn_grad, None


_norm_op.register_autograd(_norm_backward_formula, setup_context=_norm_setup_context)


def mhc_pre_norm_fn(residual: torch.Tensor, mhc_fn: torch.Tensor, mhc_norm_weight: Optional[torch.Tensor],
                    mhc_norm_eps: float, fuse_grad_acc: bool = True, n_splits: int = 16) -> torch.Tensor:
    """The mix logits ``[..., m3]`` fp32 of ``residual [..., m, H]`` bf16 (contiguous): ``mhc_fn [m3, m·H]`` fp32
    (times ``mhc_norm_weight [m·H]`` when given) applied to each token's flattened streams, scaled by the RMS factor
    with ``mhc_norm_eps``; differentiable. ``n_splits`` (>= 1) is accepted and, as in tile_kernels 1.0.0, ignored
    (one split). See the module doc for ``fuse_grad_acc`` and ``main_grad``. As tile_kernels 1.0.0
    ``modeling.mhc.ops.mhc_pre_norm_fn``."""
    _check(residual, mhc_fn, mhc_norm_eps)
    if mhc_norm_weight is not None:
        _check_normw(mhc_fn, mhc_norm_weight)
    checks.flag("fuse_grad_acc", fuse_grad_acc)
    checks.int_arg("n_splits", n_splits)
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    if compiling():
        if mhc_norm_weight is not None:
            mhc_fn = _merge_op(mhc_fn, mhc_norm_weight)
        return _norm_op(residual, mhc_fn, mhc_norm_eps)[0]
    if mhc_norm_weight is not None:
        mhc_fn = _MHCFnNormwMerge.apply(mhc_fn, mhc_norm_weight)
    return MHCPreNormFn.apply(residual, mhc_fn, mhc_norm_eps, fuse_grad_acc, n_splits)
