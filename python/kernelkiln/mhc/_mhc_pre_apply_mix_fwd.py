"""mhc_pre_apply_mix_fwd (tile_kernels 2.1 ``mhc.mhc_pre_apply_mix_fwd``): the layer input from the m streams.

Spec: kernelkiln_contract.mhc_streams.MHC_PRE_APPLY_MIX_FWD (docs/spec/mhc_streams.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._expand_to_mhc_fwd import check_hidden, check_mult, check_same_device, check_size
from kernelkiln_contract.mhc_streams import MHC_PRE_APPLY_MIX_FWD as CONTRACT
from kernelkiln_contract.mhc_streams import STREAM_VEC

__all__ = ["mhc_pre_apply_mix_fwd"]


def check_streams_and_mix(x, mix):
    """(n, m, H) of the streams ``[n, m, H]`` bf16 and their mix ``[n, m]`` fp32; shared with the backward."""
    checks.tensor("x", x, (torch.bfloat16,), ndim=3)
    checks.tensor("mix", mix, (torch.float32,), ndim=2)
    n, m, h = x.shape
    check_mult("x.shape[1]", m)
    if tuple(mix.shape) != (n, m):
        raise ValueError(f"mix must have shape [n, mhc_mult] = [{n}, {m}], got {tuple(mix.shape)} (view a "
                         "[..., mhc_mult, 1] mix as [n, mhc_mult])")
    check_hidden("x.shape[2]", h)
    check_size("x", n, h)
    checks.contiguous("x", x)
    checks.contiguous("mix", mix)
    return n, m, h


def _check(x, mix, o, device=True):
    n, m, h = check_streams_and_mix(x, mix)
    checks.tensor("o", o, (torch.bfloat16,), ndim=2)
    if tuple(o.shape) != (n, h):
        raise ValueError(f"o must have shape [n, H] = [{n}, {h}], got {tuple(o.shape)}")
    checks.contiguous("o", o)
    check_same_device("x", x, ("mix", mix), ("o", o))
    if device:
        checks.cuda("x", x)
    return n, m, h


def _apply(x, mix, o):
    n, m, h = _check(x, mix, o)
    if n and h:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), x.device, x=x.data_ptr(), mix=mix.data_ptr(), o=o.data_ptr(),
               num_vecs=n * h // STREAM_VEC, hidden_vecs=h // STREAM_VEC)


@library_op("mhc_pre_apply_mix_fwd", mutates_args=("o",))
def _mhc_pre_apply_mix_fwd_op(x: torch.Tensor, mix: torch.Tensor, o: torch.Tensor) -> None:
    _apply(x, mix, o)


@_mhc_pre_apply_mix_fwd_op.register_fake
def _mhc_pre_apply_mix_fwd_fake(x, mix, o):
    _check(x, mix, o, device=False)


def mhc_pre_apply_mix_fwd(x, mix, o):
    """Write ``o[t] = bf16(Σ_s mix[t, s] · x[t, s])`` (a product, then fma in stream order) into the preallocated
    ``o`` ``[n, H]`` bf16, from ``x`` ``[n, m, H]`` bf16 and ``mix`` ``[n, m]`` fp32; returns None. As
    tile_kernels 2.1 ``mhc.mhc_pre_apply_mix_fwd``."""
    if torch.compiler.is_compiling():
        return _mhc_pre_apply_mix_fwd_op(x, mix, o)
    return _apply(x, mix, o)
