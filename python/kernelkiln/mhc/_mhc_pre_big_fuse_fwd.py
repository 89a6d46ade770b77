"""mhc_pre_big_fuse_fwd (tile_kernels 2.1 ``mhc.mhc_pre_big_fuse_fwd``): the inference pre-block in one kernel
(split sums, RMS norm, pre/post/comb mixes, Sinkhorn, apply-mix) into preallocated outputs.

Spec: kernelkiln_contract.mhc_sinkhorn.MHC_PRE_BIG_FUSE_FWD (docs/spec/mhc_sinkhorn.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_sinkhorn_fwd import check_repeat_eps
from kernelkiln_contract.mhc_sinkhorn import BIG_FUSE_VEC, MHC_PRE_BIG_FUSE_FWD as CONTRACT
from kernelkiln_contract.mhc_sinkhorn import SINKHORN_MULTS

__all__ = ["mhc_pre_big_fuse_fwd"]


def _shape(name, t, dtype, shape, what):
    checks.tensor(name, t, (dtype,), ndim=len(shape))
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {what} = {list(shape)}, got {tuple(t.shape)}")
    checks.contiguous(name, t)


def _check(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix, layer_input, rms_eps,
           mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits, device=True):
    checks.tensor("residual", residual, (torch.bfloat16,), ndim=3)
    n, m, h = residual.shape
    if m not in SINKHORN_MULTS:
        raise ValueError(f"residual must have shape [n, m, H] with m (mhc_mult) in {list(SINKHORN_MULTS)}, got "
                         f"{tuple(residual.shape)}")
    if h == 0 or h % BIG_FUSE_VEC:
        raise ValueError(f"the hidden size (residual.shape[2]) must be a positive multiple of {BIG_FUSE_VEC}, got {h}")
    checks.contiguous("residual", residual)
    checks.int_arg("n_splits", n_splits)
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    m3 = m * (m + 2)
    _shape("gemm_out_mul", gemm_out_mul, torch.float32, (n_splits, n, m3), "[n_splits, n, m(m+2)]")
    _shape("gemm_out_sqrsum", gemm_out_sqrsum, torch.float32, (n_splits, n), "[n_splits, n]")
    _shape("mhc_scale", mhc_scale, torch.float32, (3,), "[3]")
    _shape("mhc_base", mhc_base, torch.float32, (m3,), "[m(m+2)]")
    _shape("post_mix", post_mix, torch.float32, (n, m), "[n, m]")
    _shape("comb_mix", comb_mix, torch.float32, (n, m * m), "[n, m*m]")
    _shape("layer_input", layer_input, torch.bfloat16, (n, h), "[n, H]")
    for name, v in (("rms_eps", rms_eps), ("mhc_pre_eps", mhc_pre_eps), ("mhc_post_mult_value", mhc_post_mult_value)):
        checks.float_arg(name, v)
    check_repeat_eps(sinkhorn_repeat, mhc_sinkhorn_eps, "sinkhorn_repeat", "mhc_sinkhorn_eps")
    for name, t in (("gemm_out_mul", gemm_out_mul), ("gemm_out_sqrsum", gemm_out_sqrsum), ("mhc_scale", mhc_scale),
                    ("mhc_base", mhc_base), ("post_mix", post_mix), ("comb_mix", comb_mix),
                    ("layer_input", layer_input)):
        checks.same_device(name, t, "residual", residual)
    if device:
        checks.cuda("residual", residual)
        checks.aligned("residual", residual, 16)
        checks.aligned("layer_input", layer_input, 16)
    return n, m, h


def _fuse(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix, layer_input, rms_eps,
          mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits):
    n, m, h = _check(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix, layer_input,
                     rms_eps, mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), residual.device, gemm_out_mul=gemm_out_mul.data_ptr(),
               gemm_out_sqrsum=gemm_out_sqrsum.data_ptr(), mhc_scale=mhc_scale.data_ptr(),
               mhc_base=mhc_base.data_ptr(), residual=residual.data_ptr(), post_mix=post_mix.data_ptr(),
               comb_mix=comb_mix.data_ptr(), layer_input=layer_input.data_ptr(), num_tokens=n, hidden_size=h,
               n_splits=n_splits, rms_eps=float(rms_eps), mhc_pre_eps=float(mhc_pre_eps),
               mhc_sinkhorn_eps=float(mhc_sinkhorn_eps), mhc_post_mult_value=float(mhc_post_mult_value),
               sinkhorn_repeat=sinkhorn_repeat)


@library_op("mhc_pre_big_fuse_fwd", mutates_args=("post_mix", "comb_mix", "layer_input"))
def _mhc_pre_big_fuse_fwd_op(gemm_out_mul: torch.Tensor, gemm_out_sqrsum: torch.Tensor, mhc_scale: torch.Tensor,
                             mhc_base: torch.Tensor, residual: torch.Tensor, post_mix: torch.Tensor,
                             comb_mix: torch.Tensor, layer_input: torch.Tensor, rms_eps: float, mhc_pre_eps: float,
                             mhc_sinkhorn_eps: float, mhc_post_mult_value: float, sinkhorn_repeat: int,
                             n_splits: int = 16) -> None:
    _fuse(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix, layer_input, rms_eps,
          mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits)


@_mhc_pre_big_fuse_fwd_op.register_fake
def _mhc_pre_big_fuse_fwd_fake(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix,
                               layer_input, rms_eps, mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value,
                               sinkhorn_repeat, n_splits=16):
    _check(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix, layer_input, rms_eps,
           mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits, device=False)


def mhc_pre_big_fuse_fwd(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix,
                         layer_input, rms_eps: float, mhc_pre_eps: float, mhc_sinkhorn_eps: float,
                         mhc_post_mult_value: float, sinkhorn_repeat: int, n_splits: int = 16):
    """The mHC pre-block for inference: from the norm GEMM's split partials ``gemm_out_mul [S, n, m(m+2)]`` and
    ``gemm_out_sqrsum [S, n]`` (S = n_splits), the mix scale ``[3]`` and base ``[m(m+2)]`` and ``residual [n, m, H]``
    bf16, writes the preallocated ``post_mix [n, m]``, ``comb_mix [n, m*m]`` (Sinkhorn-normalized) and
    ``layer_input [n, H]`` bf16 (the residual streams mixed with the pre mix); returns None. Bit-identical to
    mhc_reduce_partials_and_rmsnorm_fwd + mhc_pre_split_mixes_fwd + mhc_sinkhorn_fwd + mhc_pre_apply_mix_fwd. As
    tile_kernels 2.1 ``mhc.mhc_pre_big_fuse_fwd``; H a multiple of 8, sinkhorn_repeat >= 1."""
    if torch.compiler.is_compiling():
        return _mhc_pre_big_fuse_fwd_op(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix,
                                        comb_mix, layer_input, rms_eps, mhc_pre_eps, mhc_sinkhorn_eps,
                                        mhc_post_mult_value, sinkhorn_repeat, n_splits)
    return _fuse(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, post_mix, comb_mix, layer_input,
                 rms_eps, mhc_pre_eps, mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits)
