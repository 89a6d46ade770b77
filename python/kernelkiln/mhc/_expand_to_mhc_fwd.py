"""expand_to_mhc_fwd (tile_kernels 2.1 ``mhc.expand_to_mhc_fwd``): the hidden state copied into the m streams.

Spec: kernelkiln_contract.mhc_streams.EXPAND_TO_MHC_FWD (docs/spec/mhc_streams.md). This module also holds the
shape checks the other stream ops share.
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.mhc_streams import EXPAND_TO_MHC_FWD as CONTRACT
from kernelkiln_contract.mhc_streams import MHC_MULTS, STREAM_THREADS, STREAM_VEC

__all__ = ["expand_to_mhc_fwd"]
_MAX_VECS = 2**31 - 1 - STREAM_THREADS  # the kernels index (token, vector) pairs in int32


def check_mult(name, m):
    if m not in MHC_MULTS:
        raise ValueError(f"{name} (mhc_mult) must be one of {list(MHC_MULTS)}, got {m}")


def check_hidden(name, h):
    if h % STREAM_VEC:
        raise ValueError(f"{name} (the hidden size) must be a multiple of {STREAM_VEC}, got {h}")


def check_size(name, n, h):
    """n·H/VEC (the thread count of the flat kernels) must fit in int32."""
    if n * h // STREAM_VEC > _MAX_VECS:
        raise ValueError(f"{name}: n·H = {n * h} elements is too large (at most {_MAX_VECS * STREAM_VEC})")


def check_same_device(ref_name, ref, *named):
    for name, t in named:
        checks.same_device(name, t, ref_name, ref)


def _check(x, o, device=True):
    checks.tensor("x", x, (torch.bfloat16,), ndim=2)
    checks.tensor("o", o, (torch.bfloat16,), ndim=3)
    n, h = x.shape
    check_mult("o.shape[1]", o.shape[1])
    if tuple(o.shape) != (n, o.shape[1], h):
        raise ValueError(f"o must have shape [n, mhc_mult, H] = [{n}, mhc_mult, {h}], got {tuple(o.shape)}")
    check_hidden("x.shape[1]", h)
    check_size("x", n, h)
    checks.contiguous("x", x)
    checks.contiguous("o", o)
    checks.same_device("o", o, "x", x)
    if device:
        checks.cuda("x", x)
    return n, o.shape[1], h


def _expand(x, o):
    n, m, h = _check(x, o)
    if n and h:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), x.device, x=x.data_ptr(), o=o.data_ptr(),
               num_vecs=n * h // STREAM_VEC, hidden_vecs=h // STREAM_VEC)


@library_op("expand_to_mhc_fwd", mutates_args=("o",))
def _expand_to_mhc_fwd_op(x: torch.Tensor, o: torch.Tensor) -> None:
    _expand(x, o)


@_expand_to_mhc_fwd_op.register_fake
def _expand_to_mhc_fwd_fake(x, o):
    _check(x, o, device=False)


def expand_to_mhc_fwd(x, o):
    """Write ``x`` ``[n, H]`` bf16 into each stream of the preallocated ``o`` ``[n, m, H]`` bf16; returns None. As
    tile_kernels 2.1 ``mhc.expand_to_mhc_fwd``; H a multiple of 8, m one of 2, 4, 8."""
    if torch.compiler.is_compiling():
        return _expand_to_mhc_fwd_op(x, o)
    return _expand(x, o)
