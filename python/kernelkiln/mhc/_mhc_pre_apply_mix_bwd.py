"""mhc_pre_apply_mix_bwd (tile_kernels 2.1 ``mhc.mhc_pre_apply_mix_bwd``): x_grad accumulated in place, mix_grad new.

Spec: kernelkiln_contract.mhc_streams.MHC_PRE_APPLY_MIX_BWD (docs/spec/mhc_streams.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._expand_to_mhc_fwd import check_same_device
from kernelkiln.mhc._mhc_pre_apply_mix_fwd import check_streams_and_mix
from kernelkiln_contract.mhc_streams import MHC_PRE_APPLY_MIX_BWD as CONTRACT
from kernelkiln_contract.mhc_streams import STREAM_VEC

__all__ = ["mhc_pre_apply_mix_bwd"]


def _check(o_grad, x, mix, x_grad, device=True):
    n, m, h = check_streams_and_mix(x, mix)
    checks.tensor("o_grad", o_grad, (torch.bfloat16,), ndim=2)
    if tuple(o_grad.shape) != (n, h):
        raise ValueError(f"o_grad must have shape [n, H] = [{n}, {h}], got {tuple(o_grad.shape)}")
    checks.tensor("x_grad", x_grad, (torch.bfloat16,), ndim=3)
    if tuple(x_grad.shape) != (n, m, h):
        raise ValueError(f"x_grad must have x's shape {(n, m, h)}, got {tuple(x_grad.shape)}")
    checks.contiguous("o_grad", o_grad)
    checks.contiguous("x_grad", x_grad)
    check_same_device("x", x, ("o_grad", o_grad), ("mix", mix), ("x_grad", x_grad))
    if device:
        checks.cuda("x", x)
    return n, m, h


def _apply_bwd(o_grad, x, mix, x_grad):
    n, m, h = _check(o_grad, x, mix, x_grad)
    mix_grad = torch.empty((n, m), dtype=torch.float32, device=x.device)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), x.device, o_grad=o_grad.data_ptr(), x=x.data_ptr(),
               mix=mix.data_ptr(), x_grad=x_grad.data_ptr(), mix_grad=mix_grad.data_ptr(), num_tokens=n,
               hidden_vecs=h // STREAM_VEC)
    return mix_grad


@library_op("mhc_pre_apply_mix_bwd", mutates_args=("x_grad",))
def _mhc_pre_apply_mix_bwd_op(o_grad: torch.Tensor, x: torch.Tensor, mix: torch.Tensor,
                              x_grad: torch.Tensor) -> torch.Tensor:
    return _apply_bwd(o_grad, x, mix, x_grad)


@_mhc_pre_apply_mix_bwd_op.register_fake
def _mhc_pre_apply_mix_bwd_fake(o_grad, x, mix, x_grad):
    n, m, _ = _check(o_grad, x, mix, x_grad, device=False)
    return x.new_empty((n, m), dtype=torch.float32)


def mhc_pre_apply_mix_bwd(o_grad, x, mix, x_grad):
    """Accumulate ``x_grad[t, s] += mix[t, s] · o_grad[t]`` in place (bf16, one fma and one rounding) and return
    the new ``mix_grad`` ``[n, m]`` fp32 = ``Σ_h o_grad · x[t, s]``. As tile_kernels 2.1
    ``mhc.mhc_pre_apply_mix_bwd``; the reduction order is this package's own (docs/spec/mhc_streams.md)."""
    if torch.compiler.is_compiling():
        return _mhc_pre_apply_mix_bwd_op(o_grad, x, mix, x_grad)
    return _apply_bwd(o_grad, x, mix, x_grad)
