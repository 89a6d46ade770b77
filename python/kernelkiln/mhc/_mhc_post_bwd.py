"""mhc_post_bwd (tile_kernels 2.1 ``mhc.mhc_post_bwd``): the post mix's four gradients, all new tensors.

Spec: kernelkiln_contract.mhc_streams.MHC_POST_BWD (docs/spec/mhc_streams.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_post_fwd import check_post_inputs
from kernelkiln_contract.mhc_streams import MHC_POST_BWD as CONTRACT
from kernelkiln_contract.mhc_streams import STREAM_VEC

__all__ = ["mhc_post_bwd"]


def _check(x, residual, post_layer_mix, comb_res_mix, d_o, device=True):
    checks.tensor("residual", residual, (torch.bfloat16,), ndim=4)
    checks.contiguous("residual", residual)
    n, m, h = check_post_inputs(x, residual, post_layer_mix, comb_res_mix)
    checks.tensor("d_o", d_o, (torch.bfloat16,), ndim=4)
    if tuple(d_o.shape) != tuple(residual.shape):
        raise ValueError(f"d_o must have residual's shape {tuple(residual.shape)}, got {tuple(d_o.shape)}")
    checks.same_device("d_o", d_o, "residual", residual)
    if device:
        checks.cuda("residual", residual)
    return n, m, h


def _new_grads(x, residual, post_layer_mix, comb_res_mix):
    return tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device)
                 for t in (x, residual, post_layer_mix, comb_res_mix))


def _post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o):
    d_o = d_o.contiguous() if isinstance(d_o, torch.Tensor) else d_o  # as the peer
    n, m, h = _check(x, residual, post_layer_mix, comb_res_mix, d_o)
    d_x, d_residual, d_post, d_comb = _new_grads(x, residual, post_layer_mix, comb_res_mix)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), residual.device, d_o=d_o.data_ptr(),
               comb_res_mix=comb_res_mix.data_ptr(), residual=residual.data_ptr(),
               post_layer_mix=post_layer_mix.data_ptr(), x=x.data_ptr(), d_x=d_x.data_ptr(),
               d_residual=d_residual.data_ptr(), d_post_layer_mix=d_post.data_ptr(),
               d_comb_res_mix=d_comb.data_ptr(), num_tokens=n, hidden_vecs=h // STREAM_VEC)
    return d_x, d_residual, d_post, d_comb


@library_op("mhc_post_bwd")
def _mhc_post_bwd_op(x: torch.Tensor, residual: torch.Tensor, post_layer_mix: torch.Tensor,
                     comb_res_mix: torch.Tensor, d_o: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o)


@_mhc_post_bwd_op.register_fake
def _mhc_post_bwd_fake(x, residual, post_layer_mix, comb_res_mix, d_o):
    _check(x, residual, post_layer_mix, comb_res_mix, d_o.contiguous(), device=False)
    return tuple(t.new_empty(t.shape) for t in (x, residual, post_layer_mix, comb_res_mix))


def mhc_post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o):
    """``(d_x, d_residual, d_post_layer_mix, d_comb_res_mix)`` of ``mhc_post_fwd`` for the output gradient ``d_o``
    ``[B, S, m, H]`` bf16, new tensors shaped like x, residual, post_layer_mix, comb_res_mix. As tile_kernels 2.1
    ``mhc.mhc_post_bwd`` (which takes m = 4 only); d_x and d_residual are the peer's bits, the two mix gradients
    are reduced over H in this package's own fixed order (docs/spec/mhc_streams.md)."""
    if torch.compiler.is_compiling():
        return _mhc_post_bwd_op(x, residual, post_layer_mix, comb_res_mix, d_o)
    return _post_bwd(x, residual, post_layer_mix, comb_res_mix, d_o)
