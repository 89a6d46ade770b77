"""mhc_post_fwd (tile_kernels 2.1 ``mhc.mhc_post_fwd``): the m new residual streams.

Spec: kernelkiln_contract.mhc_streams.MHC_POST_FWD (docs/spec/mhc_streams.md). Two torch ops: the functional one
(a new output) and ``mhc_post_fwd_out`` for a caller's ``out``.
"""
from typing import Optional

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._expand_to_mhc_fwd import check_hidden, check_mult, check_same_device, check_size
from kernelkiln_contract.mhc_streams import MHC_POST_FWD as CONTRACT
from kernelkiln_contract.mhc_streams import STREAM_VEC

__all__ = ["mhc_post_fwd"]


def check_post_inputs(x, residual, post_layer_mix, comb_res_mix):
    """(n, m, H) of the post mix's inputs x ``[B, S, H]``, residual ``[B, S, m, H]`` bf16, post_layer_mix
    ``[B, S, m, 1]``, comb_res_mix ``[B, S, m, m]`` fp32; shared with the backward."""
    checks.tensor("x", x, (torch.bfloat16,), ndim=3)
    checks.tensor("residual", residual, (torch.bfloat16,), ndim=4)
    checks.tensor("post_layer_mix", post_layer_mix, (torch.float32,), ndim=4)
    checks.tensor("comb_res_mix", comb_res_mix, (torch.float32,), ndim=4)
    b, s, m, h = residual.shape
    check_mult("residual.shape[2]", m)
    if tuple(x.shape) != (b, s, h):
        raise ValueError(f"x must have shape [B, S, H] = [{b}, {s}, {h}], got {tuple(x.shape)}")
    if tuple(post_layer_mix.shape) != (b, s, m, 1):
        raise ValueError(f"post_layer_mix must have shape [B, S, mhc_mult, 1] = [{b}, {s}, {m}, 1], got "
                         f"{tuple(post_layer_mix.shape)}")
    if tuple(comb_res_mix.shape) != (b, s, m, m):
        raise ValueError(f"comb_res_mix must have shape [B, S, mhc_mult, mhc_mult] = [{b}, {s}, {m}, {m}], got "
                         f"{tuple(comb_res_mix.shape)}")
    check_hidden("residual.shape[3]", h)
    check_size("residual", b * s, h)
    for name, t in (("x", x), ("post_layer_mix", post_layer_mix), ("comb_res_mix", comb_res_mix)):
        checks.contiguous(name, t)
    check_same_device("residual", residual, ("x", x), ("post_layer_mix", post_layer_mix),
                      ("comb_res_mix", comb_res_mix))
    return b * s, m, h


def _check(x, residual, post_layer_mix, comb_res_mix, out, device=True):
    n, m, h = check_post_inputs(x, residual, post_layer_mix, comb_res_mix)
    if out is not None:
        checks.tensor("out", out, (torch.bfloat16,))
        if tuple(out.shape) != tuple(residual.shape):
            raise ValueError(f"out must have residual's shape {tuple(residual.shape)}, got {tuple(out.shape)}")
        checks.contiguous("out", out)
        checks.same_device("out", out, "residual", residual)
    if device:
        checks.cuda("residual", residual)
    return n, m, h


def _post(x, residual, post_layer_mix, comb_res_mix, out):
    residual = residual.contiguous() if isinstance(residual, torch.Tensor) else residual  # as the peer
    n, m, h = _check(x, residual, post_layer_mix, comb_res_mix, out)
    if out is None:
        out = torch.empty_like(residual, memory_format=torch.contiguous_format)
    if n and h:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), residual.device, x=x.data_ptr(), residual=residual.data_ptr(),
               post_layer_mix=post_layer_mix.data_ptr(), comb_res_mix=comb_res_mix.data_ptr(), out=out.data_ptr(),
               num_vecs=n * h // STREAM_VEC, hidden_vecs=h // STREAM_VEC)
    return out


@library_op("mhc_post_fwd")
def _mhc_post_fwd_op(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                     comb_res_mix: torch.Tensor) -> torch.Tensor:
    return _post(x, residual, post_layer_mix, comb_res_mix, None)


@_mhc_post_fwd_op.register_fake
def _mhc_post_fwd_fake(x, residual, post_layer_mix, comb_res_mix):
    _check(x, residual.contiguous(), post_layer_mix, comb_res_mix, None, device=False)
    return torch.empty_like(residual, memory_format=torch.contiguous_format)


@library_op("mhc_post_fwd_out", mutates_args=("out",))
def _mhc_post_fwd_out_op(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                         comb_res_mix: torch.Tensor, out: torch.Tensor) -> None:
    _post(x, residual, post_layer_mix, comb_res_mix, out)


@_mhc_post_fwd_out_op.register_fake
def _mhc_post_fwd_out_fake(x, residual, post_layer_mix, comb_res_mix, out):
    _check(x, residual.contiguous(), post_layer_mix, comb_res_mix, out, device=False)


def mhc_post_fwd(x, residual, post_layer_mix, comb_res_mix, out: Optional[torch.Tensor] = None):
    """The new streams ``out[b, s, o] = bf16(post[o] · x + Σ_i comb[i, o] · residual[i])`` (a product, then fma
    over i in order) from x ``[B, S, H]``, residual ``[B, S, m, H]`` bf16, post_layer_mix ``[B, S, m, 1]`` and
    comb_res_mix ``[B, S, m, m]`` fp32, into ``out`` (new when None) which is returned. As tile_kernels 2.1
    ``mhc.mhc_post_fwd`` (bitwise)."""
    if torch.compiler.is_compiling():
        if out is None:
            return _mhc_post_fwd_op(x, residual, post_layer_mix, comb_res_mix)
        _mhc_post_fwd_out_op(x, residual, post_layer_mix, comb_res_mix, out)
        return out
    return _post(x, residual, post_layer_mix, comb_res_mix, out)
