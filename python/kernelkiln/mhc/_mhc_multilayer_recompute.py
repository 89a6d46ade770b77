"""mhc_multilayer_recompute (tile_kernels 2.1 ``mhc.mhc_multilayer_recompute``): the pre/post chain of L layers.

Spec: kernelkiln_contract.mhc_streams.MHC_MULTILAYER_RECOMPUTE (docs/spec/mhc_streams.md). The layer counts are
runtime values: the tensors' addresses go to the kernel as one int64 table, written into pinned host memory and
copied to the device on the current stream without a synchronization (torch's pinned-memory allocator keeps the
host block until the copy has run). Under CUDA-graph capture the captured copy replays the addresses of the
captured call, as the peer's does.
"""
from typing import List

import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._expand_to_mhc_fwd import check_hidden, check_mult, check_size
from kernelkiln_contract.mhc_streams import MHC_MULTILAYER_RECOMPUTE as CONTRACT
from kernelkiln_contract.mhc_streams import STREAM_VEC

__all__ = ["mhc_multilayer_recompute"]


def _check_list(name, tensors, count, dtype, numel, ref, what):
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name} must be a list of tensors, got {type(tensors).__name__}")
    if len(tensors) != count:
        raise ValueError(f"{name} must hold {count} tensors, got {len(tensors)}")
    for i, t in enumerate(tensors):
        item = f"{name}[{i}]"
        checks.tensor(item, t, (dtype,))
        if t.numel() != numel:
            raise ValueError(f"{item} must hold {what} = {numel} elements, got shape {tuple(t.shape)}")
        checks.contiguous(item, t)
        checks.same_device(item, t, "initial_residual", ref)


def _check(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list, layer_input_list,
           residual_list, device=True):
    """(n, m, H, L, L_post); raises naming the argument."""
    checks.tensor("initial_residual", initial_residual, (torch.bfloat16,))
    if initial_residual.dim() < 2:
        raise ValueError(f"initial_residual must be [..., mhc_mult, H], got shape {tuple(initial_residual.shape)}")
    m, h = initial_residual.shape[-2:]
    check_mult("initial_residual.shape[-2]", m)
    check_hidden("initial_residual.shape[-1]", h)
    checks.contiguous("initial_residual", initial_residual)
    n = initial_residual.numel() // (m * h) if h else 0
    for name, lst in (("pre_mix_list", pre_mix_list), ("layer_output_list", layer_output_list)):
        if not isinstance(lst, (list, tuple)):
            raise TypeError(f"{name} must be a list of tensors, got {type(lst).__name__}")
    layers, posts = len(pre_mix_list), len(layer_output_list)
    if layers < 1:
        raise ValueError("pre_mix_list must hold at least one layer's mix (L >= 1)")
    if posts not in (layers - 1, layers):
        raise ValueError(f"layer_output_list must hold L - 1 or L = {layers} tensors (L_post), got {posts}")
    check_size("initial_residual", n, h)
    _check_list("pre_mix_list", pre_mix_list, layers, torch.float32, n * m, initial_residual, "n·mhc_mult")
    _check_list("layer_input_list", layer_input_list, layers, torch.bfloat16, n * h, initial_residual, "n·H")
    _check_list("layer_output_list", layer_output_list, posts, torch.bfloat16, n * h, initial_residual, "n·H")
    _check_list("post_mix_list", post_mix_list, posts, torch.float32, n * m, initial_residual, "n·mhc_mult")
    _check_list("comb_mix_list", comb_mix_list, posts, torch.float32, n * m * m, initial_residual,
                "n·mhc_mult·mhc_mult")
    _check_list("residual_list", residual_list, posts, torch.bfloat16, n * m * h, initial_residual,
                "n·mhc_mult·H")
    if device:
        checks.cuda("initial_residual", initial_residual)
    return n, m, h, layers, posts


def _recompute(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list, layer_input_list,
               residual_list):
    n, m, h, layers, posts = _check(initial_residual, pre_mix_list, layer_output_list, post_mix_list,
                                    comb_mix_list, layer_input_list, residual_list)
    if not (n and h):
        return
    addresses = [t.data_ptr() for lst in (pre_mix_list, layer_input_list, layer_output_list, post_mix_list,
                                          comb_mix_list, residual_list) for t in lst]
    table = torch.tensor(addresses, dtype=torch.int64, pin_memory=True).to(initial_residual.device,
                                                                           non_blocking=True)
    launch(CONTRACT, CONTRACT.key(mhc_mult=m), initial_residual.device, initial_residual=initial_residual.data_ptr(),
           ptr_table=table.data_ptr(), num_vecs=n * h // STREAM_VEC, hidden_vecs=h // STREAM_VEC,
           num_layers=layers, num_post=posts)


@library_op("mhc_multilayer_recompute", mutates_args=("layer_input_list", "residual_list"))
def _mhc_multilayer_recompute_op(initial_residual: torch.Tensor, pre_mix_list: List[torch.Tensor],
                                 layer_output_list: List[torch.Tensor], post_mix_list: List[torch.Tensor],
                                 comb_mix_list: List[torch.Tensor], layer_input_list: List[torch.Tensor],
                                 residual_list: List[torch.Tensor]) -> None:
    _recompute(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list, layer_input_list,
               residual_list)


@_mhc_multilayer_recompute_op.register_fake
def _mhc_multilayer_recompute_fake(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list,
                                   layer_input_list, residual_list):
    _check(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list, layer_input_list,
           residual_list, device=False)


def mhc_multilayer_recompute(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list,
                             layer_input_list, residual_list):
    """Recompute L layers' inputs and L_post (L - 1 or L) residuals of the mHC pre/post chain from
    ``initial_residual`` ``[n, m, H]`` bf16, writing ``layer_input_list`` (L tensors of n·H bf16) and
    ``residual_list`` (L_post of n·m·H bf16); returns None. Bit-identical to ``mhc_pre_apply_mix_fwd`` then
    ``mhc_post_fwd`` per layer. As tile_kernels 2.1 ``mhc.mhc_multilayer_recompute``."""
    if torch.compiler.is_compiling():
        return _mhc_multilayer_recompute_op(initial_residual, list(pre_mix_list), list(layer_output_list),
                                            list(post_mix_list), list(comb_mix_list), list(layer_input_list),
                                            list(residual_list))
    return _recompute(initial_residual, pre_mix_list, layer_output_list, post_mix_list, comb_mix_list,
                      layer_input_list, residual_list)
