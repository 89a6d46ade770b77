"""mhc_pre_split_mixes_fwd (tile_kernels 2.1 ``mhc.mhc_pre_split_mixes_fwd``): the pre, post and comb mixes of a
layer from its m(m+2) mix logits.

Spec: kernelkiln_contract.mhc_mixes.MHC_PRE_SPLIT_MIXES_FWD (docs/spec/mhc_mixes.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, mix_width, on_device, vector_bytes
from kernelkiln_contract.mhc_mixes import MHC_MULTS, MHC_PRE_SPLIT_MIXES_FWD as CONTRACT, mult3

__all__ = ["mhc_pre_split_mixes_fwd"]


def check_split_params(n, m, input_mixes, mhc_scale, mhc_base, ref_name, ref):
    """input_mixes ``[n, m3]``, mhc_scale ``[3]``, mhc_base ``[m3]`` (shared with the backward)."""
    m3 = mult3(m)
    f32_tensor("input_mixes", input_mixes, (n, m3), "[num_tokens, mhc_mult·(mhc_mult+2)]", ref_name, ref)
    f32_tensor("mhc_scale", mhc_scale, (3,), "[3]", ref_name, ref)
    f32_tensor("mhc_base", mhc_base, (m3,), "[mhc_mult·(mhc_mult+2)]", ref_name, ref)


def _check(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix, mhc_post_mult_value,
           mhc_pre_eps, device=True):
    n, m = mix_width("pre_layer_mix", pre_layer_mix, MHC_MULTS)
    checks.contiguous("pre_layer_mix", pre_layer_mix)
    check_split_params(n, m, input_mixes, mhc_scale, mhc_base, "pre_layer_mix", pre_layer_mix)
    f32_tensor("post_layer_mix", post_layer_mix, (n, m), "[num_tokens, mhc_mult]", "pre_layer_mix", pre_layer_mix)
    f32_tensor("comb_res_mix", comb_res_mix, (n, m * m), "[num_tokens, mhc_mult²]", "pre_layer_mix", pre_layer_mix)
    checks.float_arg("mhc_post_mult_value", mhc_post_mult_value)
    checks.float_arg("mhc_pre_eps", mhc_pre_eps)
    if device:
        m3 = mult3(m)
        on_device(("input_mixes", input_mixes, vector_bytes(m3)), ("mhc_base", mhc_base, vector_bytes(m3)),
                  ("pre_layer_mix", pre_layer_mix, vector_bytes(m)), ("post_layer_mix", post_layer_mix,
                                                                         vector_bytes(m)),
                  ("comb_res_mix", comb_res_mix, vector_bytes(m * m)))
    return n, m


def _forward(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix, mhc_post_mult_value,
             mhc_pre_eps):
    n, m = _check(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix,
                  mhc_post_mult_value, mhc_pre_eps)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), input_mixes.device, input_mixes=input_mixes.data_ptr(),
               mhc_scale=mhc_scale.data_ptr(), mhc_base=mhc_base.data_ptr(), pre_layer_mix=pre_layer_mix.data_ptr(),
               post_layer_mix=post_layer_mix.data_ptr(), comb_res_mix=comb_res_mix.data_ptr(),
               mhc_post_mult_value=float(mhc_post_mult_value), mhc_pre_eps=float(mhc_pre_eps), num_tokens=n)


@library_op("mhc_pre_split_mixes_fwd", mutates_args=("pre_layer_mix", "post_layer_mix", "comb_res_mix"))
def _op(input_mixes: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor, pre_layer_mix: torch.Tensor,
        post_layer_mix: torch.Tensor, comb_res_mix: torch.Tensor, mhc_post_mult_value: float,
        mhc_pre_eps: float) -> None:
    _forward(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix, mhc_post_mult_value,
             mhc_pre_eps)


@_op.register_fake
def _fake(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix, mhc_post_mult_value,
          mhc_pre_eps):
    _check(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix, mhc_post_mult_value,
           mhc_pre_eps, device=False)


def mhc_pre_split_mixes_fwd(input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix,
                            mhc_post_mult_value: float, mhc_pre_eps: float):
    """Split the logits ``input_mixes`` ``[n, m(m+2)]`` into the preallocated ``pre_layer_mix`` ``[n, m]``
    (sigmoid + eps), ``post_layer_mix`` ``[n, m]`` (sigmoid · post_mult) and ``comb_res_mix`` ``[n, m²]`` (the
    scaled logits), each column group scaled by its ``mhc_scale`` entry and shifted by ``mhc_base``; returns None.
    As tile_kernels 2.1 ``mhc.mhc_pre_split_mixes_fwd`` (same bits). m is ``pre_layer_mix.shape[1]``."""
    args = (input_mixes, mhc_scale, mhc_base, pre_layer_mix, post_layer_mix, comb_res_mix, mhc_post_mult_value,
            mhc_pre_eps)
    if torch.compiler.is_compiling():
        return _op(*args)
    return _forward(*args)
