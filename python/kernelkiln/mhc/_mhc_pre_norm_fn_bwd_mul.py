"""mhc_pre_norm_fn_bwd_mul (tile_kernels 1.0's private ``_mhc_pre_norm_fn_bwd_mul``, which v1's ``mhc_pre_norm_fn``
calls with one RMS group): the gradients of the pre-norm projection, x_grad accumulated in place, fn_grad written.

Spec: kernelkiln_contract.mhc_norm_fn.MHC_PRE_NORM_FN_BWD_MUL (docs/spec/mhc_norm_fn.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, on_device
from kernelkiln.mhc._mhc_pre_norm_fn_fwd_mul import check_x_fn, launch_bound
from kernelkiln_contract.mhc_norm_fn import BWD_HIDDEN
from kernelkiln_contract.mhc_norm_fn import MHC_PRE_NORM_FN_BWD_MUL as CONTRACT

__all__ = ["mhc_pre_norm_fn_bwd_mul"]


def _check(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad, device=True):
    n, k, m3 = check_x_fn(x, fn, BWD_HIDDEN)
    f32_tensor("out_mul_grad", out_mul_grad, (n, 1, m3), "[num_tokens, 1, mhc_mult3]", "x", x)
    f32_tensor("sqrsum_grad", sqrsum_grad, (n, 1), "[num_tokens, 1]", "x", x)
    checks.tensor("x_grad", x_grad, (torch.bfloat16,), ndim=2)
    if tuple(x_grad.shape) != (n, k):
        raise ValueError(f"x_grad must have x's shape [num_tokens, K] = {[n, k]}, got {list(x_grad.shape)}")
    checks.contiguous("x_grad", x_grad)
    checks.same_device("x_grad", x_grad, "x", x)
    f32_tensor("fn_grad", fn_grad, (m3, k), "fn's shape [mhc_mult3, K]", "x", x)
    if device:
        on_device(("x", x, 4), ("fn", fn, 4), ("out_mul_grad", out_mul_grad, 4), ("sqrsum_grad", sqrsum_grad, 4),
                  ("x_grad", x_grad, 4), ("fn_grad", fn_grad, 4))
    return n, k, m3


def _backward(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad):
    n, k, m3 = _check(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad)
    if not k:
        return
    if not n:  # no token: the gradient of fn is an empty sum and x_grad is empty
        fn_grad.zero_()
        return
    launch_bound(CONTRACT, x.device, {"out_mul_grad": out_mul_grad.view(n, m3), "sqrsum_grad": sqrsum_grad.view(n),
                                      "x": x, "fn": fn, "x_grad": x_grad, "fn_grad": fn_grad})


@library_op("mhc_pre_norm_fn_bwd_mul", mutates_args=("x_grad", "fn_grad"))
def _op(out_mul_grad: torch.Tensor, sqrsum_grad: torch.Tensor, x: torch.Tensor, fn: torch.Tensor,
        x_grad: torch.Tensor, fn_grad: torch.Tensor) -> None:
    _backward(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad)


@_op.register_fake
def _fake(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad):
    _check(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad, device=False)


def mhc_pre_norm_fn_bwd_mul(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad):
    """Backward of ``mhc_pre_norm_fn_fwd_mul``; returns None. x_grad ``[n, K]`` bf16 is ACCUMULATED in place:
    ``x_grad = bf16(x_grad + out_mul_grad · fn + 2·x·sqrsum_grad)``; fn_grad ``[m3, K]`` fp32 is overwritten with
    ``out_mul_gradᵀ · x``. Both products on TF32 tensor cores; fn_grad sums the tokens serially in token order, so
    both outputs are run-to-run bit-identical.

    out_mul_grad ``[n, 1, m3]`` fp32 (rounded by the caller with ``kernelkiln._formats.round_to_tf32``),
    sqrsum_grad ``[n, 1]`` fp32, and the forward's x ``[n, K]`` bf16 (K a multiple of 128) and fn ``[m3, K]`` fp32
    (1 <= m3 <= 32). As tile_kernels 1.0's ``_mhc_pre_norm_fn_bwd_mul(m3, 1, K)`` kernel."""
    if torch.compiler.is_compiling():
        return _op(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad)
    return _backward(out_mul_grad, sqrsum_grad, x, fn, x_grad, fn_grad)
