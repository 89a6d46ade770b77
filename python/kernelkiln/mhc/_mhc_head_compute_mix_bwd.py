"""mhc_head_compute_mix_bwd (tile_kernels 2.1 ``mhc.mhc_head_compute_mix_bwd``): the head mix's input gradient and
the per-CTA partials of the scale and base gradients, which the caller sums.

Spec: kernelkiln_contract.mhc_mixes.MHC_HEAD_COMPUTE_MIX_BWD (docs/spec/mhc_mixes.md).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln.mhc._mhc_head_compute_mix_fwd import f32_tensor, mix_width, on_device, token_block, vector_bytes
from kernelkiln_contract.mhc_mixes import MHC_HEAD_COMPUTE_MIX_BWD as CONTRACT
from kernelkiln_contract.mhc_mixes import MHC_MULTS

__all__ = ["mhc_head_compute_mix_bwd"]


def _check(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
           mhc_base_grad_partial, num_sms, token_block_size, device=True):
    n, m = mix_width("input_mix", input_mix, MHC_MULTS)
    checks.contiguous("input_mix", input_mix)
    tm = "[num_tokens, mhc_mult]"
    f32_tensor("output_mix_grad", output_mix_grad, (n, m), tm, "input_mix", input_mix)
    f32_tensor("mhc_scale", mhc_scale, (1,), "[1]", "input_mix", input_mix)
    f32_tensor("mhc_base", mhc_base, (m,), "[mhc_mult]", "input_mix", input_mix)
    f32_tensor("input_mix_grad", input_mix_grad, (n, m), tm, "input_mix", input_mix)
    checks.int_arg("num_sms", num_sms)
    if num_sms < 1:
        raise ValueError(f"num_sms (the partial rows, the grid) must be >= 1, got {num_sms}")
    f32_tensor("mhc_scale_grad_partial", mhc_scale_grad_partial, (num_sms, 1), "[num_sms, 1]", "input_mix",
               input_mix)
    f32_tensor("mhc_base_grad_partial", mhc_base_grad_partial, (num_sms, m), "[num_sms, mhc_mult]", "input_mix",
               input_mix)
    token_block(token_block_size)
    if device:
        v = vector_bytes(m)
        on_device(("input_mix", input_mix, v), ("output_mix_grad", output_mix_grad, v), ("mhc_base", mhc_base, v),
                  ("input_mix_grad", input_mix_grad, v))
    return n, m


def _backward(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
              mhc_base_grad_partial, num_sms, token_block_size=0):
    n, m = _check(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
                  mhc_base_grad_partial, num_sms, token_block_size)
    # launched for n = 0 too: every CTA writes its (zero) partial row
    launch(CONTRACT, CONTRACT.key(mhc_mult=m), input_mix.device, output_mix_grad=output_mix_grad.data_ptr(),
           input_mix=input_mix.data_ptr(), mhc_scale=mhc_scale.data_ptr(), mhc_base=mhc_base.data_ptr(),
           input_mix_grad=input_mix_grad.data_ptr(), mhc_scale_grad_partial=mhc_scale_grad_partial.data_ptr(),
           mhc_base_grad_partial=mhc_base_grad_partial.data_ptr(), num_tokens=n, num_sms=num_sms)


@library_op("mhc_head_compute_mix_bwd",
            mutates_args=("input_mix_grad", "mhc_scale_grad_partial", "mhc_base_grad_partial"))
def _op(output_mix_grad: torch.Tensor, input_mix: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor,
        input_mix_grad: torch.Tensor, mhc_scale_grad_partial: torch.Tensor, mhc_base_grad_partial: torch.Tensor,
        num_sms: int, token_block_size: int) -> None:
    _backward(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
              mhc_base_grad_partial, num_sms, token_block_size)


@_op.register_fake
def _fake(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
          mhc_base_grad_partial, num_sms, token_block_size):
    _check(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
           mhc_base_grad_partial, num_sms, token_block_size, device=False)


def mhc_head_compute_mix_bwd(output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
                             mhc_base_grad_partial, num_sms: int, token_block_size: int = 0):
    """Backward of ``mhc_head_compute_mix_fwd`` into preallocated tensors: ``input_mix_grad`` ``[n, m]``, and the
    per-CTA partials ``mhc_scale_grad_partial`` ``[num_sms, 1]`` and ``mhc_base_grad_partial`` ``[num_sms, m]``
    (every row overwritten) whose column sums are the scale and base gradients; returns None. As tile_kernels 2.1
    ``mhc.mhc_head_compute_mix_bwd``. ``token_block_size`` changes nothing here."""
    args = (output_mix_grad, input_mix, mhc_scale, mhc_base, input_mix_grad, mhc_scale_grad_partial,
            mhc_base_grad_partial, num_sms, token_block_size)
    if torch.compiler.is_compiling():
        return _op(*args)
    return _backward(*args)
