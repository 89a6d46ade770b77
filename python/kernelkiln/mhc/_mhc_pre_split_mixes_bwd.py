"""mhc_pre_split_mixes_bwd (tile_kernels 2.1 ``mhc.mhc_pre_split_mixes_bwd``): the split mixes' logit gradient and
the scale and base gradients.

Spec: kernelkiln_contract.mhc_mixes.MHC_PRE_SPLIT_MIXES_BWD and MHC_PRE_SPLIT_MIXES_REDUCE (docs/spec/mhc_mixes.md).
Two launches, as the peer: the backward writes one partial row per CTA into a scratch buffer (P = the SM count at
the call, ``config.get_num_sms()``), the reduce kernel adds the rows in order into the two gradients.
"""
import torch

from kernelkiln import config
from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, mix_width, on_device, vector_bytes
from kernelkiln.mhc._mhc_pre_split_mixes_fwd import check_split_params
from kernelkiln_contract.mhc_mixes import MHC_PRE_SPLIT_MIXES_BWD as CONTRACT
from kernelkiln_contract.mhc_mixes import MHC_PRE_SPLIT_MIXES_REDUCE as REDUCE
from kernelkiln_contract.mhc_mixes import SPLIT_BWD_MULTS, mult3

__all__ = ["mhc_pre_split_mixes_bwd"]


def _check(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix, mhc_scale,
           mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value, device=True):
    n, m = mix_width("pre_layer_mix_grad", pre_layer_mix_grad, SPLIT_BWD_MULTS)
    checks.contiguous("pre_layer_mix_grad", pre_layer_mix_grad)
    ref = ("pre_layer_mix_grad", pre_layer_mix_grad)
    m3 = mult3(m)
    tm = "[num_tokens, mhc_mult]"
    f32_tensor("post_layer_mix_grad", post_layer_mix_grad, (n, m), tm, *ref)
    f32_tensor("comb_res_mix_grad", comb_res_mix_grad, (n, m * m), "[num_tokens, mhc_mult²]", *ref)
    check_split_params(n, m, input_mixes, mhc_scale, mhc_base, *ref)
    f32_tensor("post_layer_mix", post_layer_mix, (n, m), tm, *ref)
    f32_tensor("input_mixes_grad", input_mixes_grad, (n, m3), "[num_tokens, mhc_mult·(mhc_mult+2)]", *ref)
    f32_tensor("mhc_scale_grad", mhc_scale_grad, (3,), "[3]", *ref)
    f32_tensor("mhc_base_grad", mhc_base_grad, (m3,), "[mhc_mult·(mhc_mult+2)]", *ref)
    checks.float_arg("mhc_post_mult_value", mhc_post_mult_value)
    if device:
        vm, vm3 = vector_bytes(m), vector_bytes(m3)
        on_device(("pre_layer_mix_grad", pre_layer_mix_grad, vm), ("post_layer_mix_grad", post_layer_mix_grad, vm),
                  ("comb_res_mix_grad", comb_res_mix_grad, vector_bytes(m * m)), ("input_mixes", input_mixes, vm3),
                  ("post_layer_mix", post_layer_mix, vm), ("mhc_base", mhc_base, vm3),
                  ("input_mixes_grad", input_mixes_grad, vm3))
    return n, m


def _backward(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix, mhc_scale,
              mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value):
    n, m = _check(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix,
                  mhc_scale, mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value)
    m3 = mult3(m)
    p = config.get_num_sms()
    scratch = torch.empty(p * (3 + m3), dtype=torch.float32, device=input_mixes.device)
    scale_partial, base_partial = scratch[: p * 3], scratch[p * 3:]
    device = input_mixes.device
    # launched for n = 0 too: the partials are then +0 and so are the gradients
    launch(CONTRACT, CONTRACT.key(mhc_mult=m), device, pre_layer_mix_grad=pre_layer_mix_grad.data_ptr(),
           post_layer_mix_grad=post_layer_mix_grad.data_ptr(), comb_res_mix_grad=comb_res_mix_grad.data_ptr(),
           input_mixes=input_mixes.data_ptr(), post_layer_mix=post_layer_mix.data_ptr(),
           mhc_scale=mhc_scale.data_ptr(), mhc_base=mhc_base.data_ptr(), input_mixes_grad=input_mixes_grad.data_ptr(),
           mhc_scale_grad_partial=scale_partial.data_ptr(), mhc_base_grad_partial=base_partial.data_ptr(),
           mhc_post_mult_value=float(mhc_post_mult_value), num_tokens=n, num_partials=p)
    launch(REDUCE, REDUCE.key(dtype="float32"), device, mhc_scale_grad_partial=scale_partial.data_ptr(),
           mhc_base_grad_partial=base_partial.data_ptr(), mhc_scale_grad=mhc_scale_grad.data_ptr(),
           mhc_base_grad=mhc_base_grad.data_ptr(), num_partials=p, mhc_mult3=m3)


@library_op("mhc_pre_split_mixes_bwd", mutates_args=("input_mixes_grad", "mhc_scale_grad", "mhc_base_grad"))
def _op(pre_layer_mix_grad: torch.Tensor, post_layer_mix_grad: torch.Tensor, comb_res_mix_grad: torch.Tensor,
        input_mixes: torch.Tensor, post_layer_mix: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
        input_mixes_grad: torch.Tensor, mhc_scale_grad: torch.Tensor, mhc_base_grad: torch.Tensor,
        mhc_post_mult_value: float) -> None:
    _backward(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix, mhc_scale,
              mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value)


@_op.register_fake
def _fake(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix, mhc_scale,
          mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value):
    _check(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix, mhc_scale,
           mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value, device=False)


def mhc_pre_split_mixes_bwd(pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix,
                            mhc_scale, mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad,
                            mhc_post_mult_value: float):
    """Backward of ``mhc_pre_split_mixes_fwd`` into preallocated tensors (overwritten): ``input_mixes_grad``
    ``[n, m(m+2)]``, ``mhc_scale_grad`` ``[3]`` and ``mhc_base_grad`` ``[m(m+2)]``; ``post_layer_mix`` is the
    forward's output. Returns None. As tile_kernels 2.1 ``mhc.mhc_pre_split_mixes_bwd``; the parameter gradients
    depend on ``config.get_num_sms()`` (the partial count), deterministically."""
    args = (pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad, input_mixes, post_layer_mix, mhc_scale,
            mhc_base, input_mixes_grad, mhc_scale_grad, mhc_base_grad, mhc_post_mult_value)
    if torch.compiler.is_compiling():
        return _op(*args)
    return _backward(*args)
