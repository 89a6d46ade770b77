"""mhc_reduce_partials_and_rmsnorm_fwd (tile_kernels 2.1 ``mhc.mhc_reduce_partials_and_rmsnorm_fwd``): the split-K
partials of the pre-norm GEMM summed and RMS-normalized.

Spec: kernelkiln_contract.mhc_mixes.MHC_REDUCE_PARTIALS_AND_RMSNORM_FWD (docs/spec/mhc_mixes.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, on_device
from kernelkiln_contract.mhc_mixes import MHC_REDUCE_PARTIALS_AND_RMSNORM_FWD as CONTRACT
from kernelkiln_contract.mhc_mixes import RMS_VEC

__all__ = ["mhc_reduce_partials_and_rmsnorm_fwd"]


def check_rms_scalars(rms_group_size, rms_eps):
    checks.int_arg("rms_group_size", rms_group_size)
    if rms_group_size < 1:
        raise ValueError(f"rms_group_size (the elements behind each squared sum) must be >= 1, got {rms_group_size}")
    checks.float_arg("rms_eps", rms_eps)


def check_mult3(name, t):
    m3 = t.shape[-1]
    if m3 < RMS_VEC or m3 % RMS_VEC:
        raise ValueError(f"{name}.shape[-1] (mhc_mult3) must be a positive multiple of {RMS_VEC} (m(m+2) for even "
                         f"m), got {m3}")
    return m3


def _check(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits, device=True):
    checks.tensor("out_mul_splitted", out_mul_splitted, (torch.float32,), ndim=4)
    s, n, g, m3 = out_mul_splitted.shape
    check_mult3("out_mul_splitted", out_mul_splitted)
    checks.contiguous("out_mul_splitted", out_mul_splitted)
    ref = ("out_mul_splitted", out_mul_splitted)
    f32_tensor("sqrsum_splitted", sqrsum_splitted, (s, n, g), "[n_splits, num_tokens, n_rms_group]", *ref)
    f32_tensor("out_mul", out_mul, (n, g, m3), "[num_tokens, n_rms_group, mhc_mult3]", *ref)
    f32_tensor("sqrsum", sqrsum, (n, g), "[num_tokens, n_rms_group]", *ref)
    f32_tensor("out", out, (n, m3), "[num_tokens, mhc_mult3]", *ref)
    check_rms_scalars(rms_group_size, rms_eps)
    checks.int_arg("n_splits", n_splits)
    if n_splits != s or s < 1:
        raise ValueError(f"n_splits must equal out_mul_splitted.shape[0] (the partials, >= 1) = {s}, got {n_splits}")
    if device:
        on_device(("out_mul_splitted", out_mul_splitted, 16), ("out_mul", out_mul, 16), ("out", out, 16))
    return s, n, g, m3


def _forward(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits):
    s, n, g, m3 = _check(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits)
    if n:
        launch(CONTRACT, CONTRACT.key(dtype="float32"), out.device, out_mul_splitted=out_mul_splitted.data_ptr(),
               sqrsum_splitted=sqrsum_splitted.data_ptr(), out_mul=out_mul.data_ptr(), sqrsum=sqrsum.data_ptr(),
               out=out.data_ptr(), num_tokens=n, n_rms_group=g, num_col_vecs=m3 // RMS_VEC,
               rms_group_size=rms_group_size, rms_eps=float(rms_eps), n_splits=s)


@library_op("mhc_reduce_partials_and_rmsnorm_fwd", mutates_args=("out_mul", "sqrsum", "out"))
def _op(out_mul_splitted: torch.Tensor, sqrsum_splitted: torch.Tensor, out_mul: torch.Tensor, sqrsum: torch.Tensor,
        out: torch.Tensor, rms_group_size: int, rms_eps: float, n_splits: int) -> None:
    _forward(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits)


@_op.register_fake
def _fake(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits):
    _check(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits, device=False)


def mhc_reduce_partials_and_rmsnorm_fwd(out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out,
                                        rms_group_size: int, rms_eps: float, n_splits: int):
    """Sum the S split-K partials ``out_mul_splitted`` ``[S, n, G, m3]`` and ``sqrsum_splitted`` ``[S, n, G]`` (in
    split order) into the preallocated ``out_mul`` ``[n, G, m3]`` and ``sqrsum`` ``[n, G]``, and write ``out``
    ``[n, m3] = Σ_g out_mul_g · rsqrt(sqrsum_g / rms_group_size + rms_eps)``; returns None. As tile_kernels 2.1
    ``mhc.mhc_reduce_partials_and_rmsnorm_fwd``; n_splits must equal S."""
    args = (out_mul_splitted, sqrsum_splitted, out_mul, sqrsum, out, rms_group_size, rms_eps, n_splits)
    if torch.compiler.is_compiling():
        return _op(*args)
    return _forward(*args)
