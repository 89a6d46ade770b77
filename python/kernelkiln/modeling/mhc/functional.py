"""tile_kernels 1.0.0's ``modeling.mhc`` compositions: ``expand_from_embedding``, ``mhc_pre`` and ``mhc_head``.

Two defects of 1.0.0 are fixed here (README, "Differences"):

* ``mhc_pre`` without autograd (the fused inference path, ``mhc_pre_big_fuse``) ignored ``norm_weight`` in 1.0.0;
  here the weight is folded into fn first (``mhc_fn_normw_merge_fwd``, the same product the training path uses),
  as upstream later did, so the two paths agree (bit for bit with our kernels).
* ``mhc_head``'s backward needed the ``grad_from_mhc_post`` buffer on the head residual's storage, which nothing
  leaves there (no mhc_post consumes the head's residual), so training through it failed. Here mhc_head calls
  ``mhc_pre_norm_fn`` with ``fuse_grad_acc=False``: its residual gradient is returned and autograd adds it to
  apply-mix's (one bf16 addition more than a fused accumulation would take). Planting a buffer instead would need
  a hook in the backward between two of the Functions and leave the buffer behind when the head is not trained.
"""
import torch
import torch.nn.functional as F

from kernelkiln._ops import checks
from kernelkiln.modeling.mhc.ops import (expand_to_mhc, mhc_head_compute_mix, mhc_pre_apply_mix, mhc_pre_big_fuse,
                                         mhc_pre_norm_fn, mhc_pre_split_mixes, sinkhorn_normalize)

__all__ = ["expand_from_embedding", "mhc_pre", "mhc_head"]


def expand_from_embedding(x: torch.Tensor, mhc_mult: int = 4) -> torch.Tensor:
    """The embedding ``x [..., H]`` bf16 as the mHC residual ``[..., mhc_mult, H]`` (every stream a copy);
    differentiable. As tile_kernels 1.0.0 ``modeling.mhc.expand_from_embedding``."""
    return expand_to_mhc(x, mhc_mult)


def _merged_fn(fn, norm_weight):
    from kernelkiln.mhc import mhc_fn_normw_merge_fwd
    from kernelkiln.modeling.mhc.ops.norm_fn import _check_normw
    checks.tensor("fn", fn, (torch.float32,), ndim=2)
    _check_normw(fn, norm_weight)
    out_fn = torch.empty(fn.shape, dtype=torch.float32, device=fn.device)
    mhc_fn_normw_merge_fwd(fn.contiguous(), norm_weight, out_fn)
    return out_fn


def mhc_pre(residual: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, *,
            norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6, mhc_mult: int = 4,
            post_mult_value: float = 1.0, pre_eps: float = 1e-6, sinkhorn_eps: float = 1e-6,
            sinkhorn_repeat: int = 10, n_splits: int = 16) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The mHC pre-block of a sublayer: ``(layer_input [..., H], (post_mix [..., m, 1], comb_mix [..., m, m]))``
    from ``residual [..., m, H]`` bf16, ``fn [m(m+2), m·H]``, ``scale [3]``, ``base [m(m+2)]`` fp32 and an optional
    RMS-norm weight ``[m·H]``. With autograd on: mhc_pre_norm_fn, mhc_pre_split_mixes, sinkhorn_normalize,
    mhc_pre_apply_mix (the residual's gradient fused into mhc_post's, see ops._common: the residual must also go
    to mhc_post in eager training). Without autograd: mhc_pre_big_fuse (norm weight folded in first; see the module
    doc). As tile_kernels 1.0.0 ``modeling.mhc.mhc_pre``."""
    if not torch.is_grad_enabled():
        if norm_weight is not None:
            fn = _merged_fn(fn, norm_weight)
        post_mix, comb_mix, layer_input = mhc_pre_big_fuse(
            residual, fn, scale, base, rms_eps=norm_eps, mhc_pre_eps=pre_eps, mhc_sinkhorn_eps=sinkhorn_eps,
            mhc_post_mult_value=post_mult_value, sinkhorn_repeat=sinkhorn_repeat, n_splits=n_splits)
        return layer_input, (post_mix, comb_mix)
    mixes = mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps, n_splits=n_splits)
    pre_mix, post_mix, comb_mix = mhc_pre_split_mixes(mixes, scale, base, mhc_mult, post_mult_value, pre_eps)
    comb_mix = sinkhorn_normalize(comb_mix, repeat=sinkhorn_repeat, eps=sinkhorn_eps)
    layer_input = mhc_pre_apply_mix(residual, pre_mix)
    return layer_input, (post_mix, comb_mix)


def mhc_head(residual: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, *,
             norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6, mhc_mult: int = 4,
             pre_eps: float = 1e-6, n_splits: int = 16) -> torch.Tensor:
    """The LM head's input ``[..., H]`` bf16 from the final ``residual [..., m, H]``: ``fn [m, m·H]`` (zero-padded
    to m(m+2) rows for the projection), ``scale [1]`` (or any one-element tensor), ``base [m]``, an optional RMS-norm
    weight ``[m·H]``; mix = sigmoid(normalized logits[:m] · scale + base) + pre_eps, then the streams mixed.
    Differentiable, with its own residual gradient (module doc). As tile_kernels 1.0.0 ``modeling.mhc.mhc_head``."""
    checks.tensor("fn", fn, (torch.float32,), ndim=2)
    checks.int_arg("mhc_mult", mhc_mult)
    mhc_mult3 = mhc_mult * (2 + mhc_mult)
    if fn.shape[0] < mhc_mult3:
        fn = F.pad(fn, (0, 0, 0, mhc_mult3 - fn.shape[0]))
    mixes = mhc_pre_norm_fn(residual, fn, norm_weight, norm_eps, fuse_grad_acc=False, n_splits=n_splits)
    mixes = mixes[..., :mhc_mult]
    checks.tensor("scale", scale, (torch.float32,))
    if scale.numel() == 1:
        scale = scale.reshape(1)
    mix = mhc_head_compute_mix(mixes, scale, base, pre_eps)
    return mhc_pre_apply_mix(residual, mix.unsqueeze(-1))
