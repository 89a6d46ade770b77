"""``mhc_pre_big_fuse``: the inference pre-block of tile_kernels 1.0.0 (no autograd): the one-split TF32 projection
GEMM of mhc_pre_norm_fn, then kernelkiln.mhc.mhc_pre_big_fuse_fwd (RMS norm, split mixes, Sinkhorn and apply-mix in
one kernel, bit-identical to that chain of our kernels)."""
import torch

from kernelkiln._ops import checks
from kernelkiln.mhc import mhc_pre_big_fuse_fwd
from kernelkiln.modeling.mhc.ops._common import rows, shaped, streams
from kernelkiln.modeling.mhc.ops.norm_fn import pre_norm_fn_mul_fwd

__all__ = ["mhc_pre_big_fuse"]


def mhc_pre_big_fuse(residual: torch.Tensor, fn: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
                     rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float, mhc_post_mult_value: float,
                     sinkhorn_repeat: int, n_splits: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(post_mix [..., m, 1], comb_mix [..., m, m], layer_input [..., H])`` of ``residual [..., m, H]`` bf16 with
    ``fn [m(m+2), m·H]``, ``mhc_scale [3]``, ``mhc_base [m(m+2)]`` fp32 (fn holds no norm weight: fold one in
    first). ``n_splits`` (>= 1) is accepted and ignored (one split), as in 1.0.0. As tile_kernels 1.0.0
    ``modeling.mhc.ops.mhc_pre_big_fuse``."""
    m, h = streams("residual", residual)
    checks.contiguous("residual", residual)
    m3 = m * (m + 2)
    shaped("fn", fn, torch.float32, (m3, m * h), "[mhc_mult·(mhc_mult+2), mhc_mult·hidden_size]")
    shaped("mhc_scale", mhc_scale, torch.float32, (3,), "[3]")
    shaped("mhc_base", mhc_base, torch.float32, (m3,), "[mhc_mult·(mhc_mult+2)]")
    checks.int_arg("n_splits", n_splits)
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    outer, n = residual.shape[:-2], rows(residual, 2)
    _, gemm_out_mul, gemm_out_sqrsum = pre_norm_fn_mul_fwd(residual, fn)
    post_mix = torch.empty((*outer, m, 1), dtype=torch.float32, device=residual.device)
    comb_mix = torch.empty((*outer, m, m), dtype=torch.float32, device=residual.device)
    layer_input = torch.empty((*outer, h), dtype=torch.bfloat16, device=residual.device)
    mhc_pre_big_fuse_fwd(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual.view(n, m, h),
                         post_mix.view(n, m), comb_mix.view(n, m * m), layer_input.view(n, h), rms_eps, mhc_pre_eps,
                         mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, 1)
    return post_mix, comb_mix, layer_input
