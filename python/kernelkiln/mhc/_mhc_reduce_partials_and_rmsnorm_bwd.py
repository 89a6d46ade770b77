"""mhc_reduce_partials_and_rmsnorm_bwd (tile_kernels 2.1 ``mhc.mhc_reduce_partials_and_rmsnorm_bwd``): the gradients
of the summed partials and squared sums through the RMS normalization.

Spec: kernelkiln_contract.mhc_mixes.MHC_REDUCE_PARTIALS_AND_RMSNORM_BWD (docs/spec/mhc_mixes.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, on_device
from kernelkiln.mhc._mhc_reduce_partials_and_rmsnorm_fwd import check_mult3, check_rms_scalars
from kernelkiln_contract.mhc_mixes import MHC_REDUCE_PARTIALS_AND_RMSNORM_BWD as CONTRACT
from kernelkiln_contract.mhc_mixes import RMS_VEC

__all__ = ["mhc_reduce_partials_and_rmsnorm_bwd"]


def _check(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps, device=True):
    checks.tensor("out_mul", out_mul, (torch.float32,), ndim=3)
    n, g, m3 = out_mul.shape
    check_mult3("out_mul", out_mul)
    checks.contiguous("out_mul", out_mul)
    ref = ("out_mul", out_mul)
    f32_tensor("out_grad", out_grad, (n, m3), "[num_tokens, mhc_mult3]", *ref)
    f32_tensor("sqrsum", sqrsum, (n, g), "[num_tokens, n_rms_group]", *ref)
    f32_tensor("out_mul_grad", out_mul_grad, (n, g, m3), "out_mul's shape", *ref)
    f32_tensor("sqrsum_grad", sqrsum_grad, (n, g), "sqrsum's shape", *ref)
    check_rms_scalars(rms_group_size, rms_eps)
    if device:
        on_device(("out_mul", out_mul, 16), ("out_grad", out_grad, 16), ("out_mul_grad", out_mul_grad, 16))
    return n, g, m3


def _backward(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps):
    n, g, m3 = _check(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps)
    if n * g:
        launch(CONTRACT, CONTRACT.key(dtype="float32"), out_mul.device, out_grad=out_grad.data_ptr(),
               out_mul=out_mul.data_ptr(), sqrsum=sqrsum.data_ptr(), out_mul_grad=out_mul_grad.data_ptr(),
               sqrsum_grad=sqrsum_grad.data_ptr(), num_rows=n * g, n_rms_group=g, num_col_vecs=m3 // RMS_VEC,
               rms_group_size=rms_group_size, rms_eps=float(rms_eps),
               # the peer's compile-time eps·gs: the product in float64, rounded once to fp32 by the launch
               rms_eps_group=float(rms_eps) * rms_group_size)


@library_op("mhc_reduce_partials_and_rmsnorm_bwd", mutates_args=("out_mul_grad", "sqrsum_grad"))
def _op(out_grad: torch.Tensor, out_mul: torch.Tensor, sqrsum: torch.Tensor, out_mul_grad: torch.Tensor,
        sqrsum_grad: torch.Tensor, rms_group_size: int, rms_eps: float) -> None:
    _backward(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps)


@_op.register_fake
def _fake(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps):
    _check(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps, device=False)


def mhc_reduce_partials_and_rmsnorm_bwd(out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size: int,
                                        rms_eps: float):
    """Backward of ``mhc_reduce_partials_and_rmsnorm_fwd`` with respect to the summed ``out_mul`` ``[n, G, m3]``
    and ``sqrsum`` ``[n, G]`` (the forward's outputs), into the preallocated ``out_mul_grad`` and ``sqrsum_grad``
    (overwritten); ``out_grad`` is ``[n, m3]``. Returns None. As tile_kernels 2.1
    ``mhc.mhc_reduce_partials_and_rmsnorm_bwd``."""
    args = (out_grad, out_mul, sqrsum, out_mul_grad, sqrsum_grad, rms_group_size, rms_eps)
    if torch.compiler.is_compiling():
        return _op(*args)
    return _backward(*args)
