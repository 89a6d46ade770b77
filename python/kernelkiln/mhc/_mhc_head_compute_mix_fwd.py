"""mhc_head_compute_mix_fwd (tile_kernels 2.1 ``mhc.mhc_head_compute_mix_fwd``): the head's pre mix
``sigmoid(fma(x, s, b)) + eps``.

Spec: kernelkiln_contract.mhc_mixes.MHC_HEAD_COMPUTE_MIX_FWD (docs/spec/mhc_mixes.md). This module also holds the
argument checks the other mix ops share (fp32 tensors of a given shape, device and alignment checks).
"""
import torch

from kernelkiln._ops import checks
from kernelkiln._ops.launch import launch
from kernelkiln._ops.library import library_op
from kernelkiln_contract.mhc_mixes import MHC_HEAD_COMPUTE_MIX_FWD as CONTRACT
from kernelkiln_contract.mhc_mixes import MHC_MULTS

__all__ = ["mhc_head_compute_mix_fwd"]


def f32_tensor(name, t, shape, what, ref_name=None, ref=None):
    """An fp32, contiguous tensor of exactly ``shape`` (``what`` names its dimensions in the message), on ``ref``'s
    device."""
    checks.tensor(name, t, (torch.float32,), ndim=len(shape))
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {what} = {list(shape)}, got {list(t.shape)}")
    checks.contiguous(name, t)
    if ref is not None:
        checks.same_device(name, t, ref_name, ref)


def vector_bytes(row_len):
    """The widest access the kernels make into rows of ``row_len`` fp32 values (16-byte pieces where it divides)."""
    return 4 * (4 if row_len % 4 == 0 else 2 if row_len % 2 == 0 else 1)


def on_device(*named):
    """CUDA, and each (name, tensor, alignment in bytes) aligned; after every shape and value check."""
    checks.cuda(named[0][0], named[0][1])
    for name, t, align in named:
        checks.aligned(name, t, align)


def mix_width(name, t, allowed):
    """m from a 2-D ``[num_tokens, m]`` fp32 tensor: checked to be one of ``allowed``."""
    checks.tensor(name, t, (torch.float32,), ndim=2)
    m = t.shape[1]
    if m not in allowed:
        raise ValueError(f"{name}.shape[1] (mhc_mult) must be one of {list(allowed)}, got {m}")
    return t.shape[0], m


def token_block(token_block_size):
    """The peer's tiling knob: an int >= 0 (0 = its default). It does not change our kernels' results."""
    checks.int_arg("token_block_size", token_block_size)
    if token_block_size < 0:
        raise ValueError(f"token_block_size must be >= 0 (0 picks the default), got {token_block_size}")


def _check(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size, device=True):
    n, m = mix_width("input_mix", input_mix, MHC_MULTS)
    checks.contiguous("input_mix", input_mix)
    f32_tensor("mhc_scale", mhc_scale, (1,), "[1]", "input_mix", input_mix)
    f32_tensor("mhc_base", mhc_base, (m,), "[mhc_mult]", "input_mix", input_mix)
    f32_tensor("output_mix", output_mix, (n, m), "[num_tokens, mhc_mult]", "input_mix", input_mix)
    checks.float_arg("mhc_pre_eps", mhc_pre_eps)
    token_block(token_block_size)
    if device:
        v = vector_bytes(m)
        on_device(("input_mix", input_mix, v), ("mhc_base", mhc_base, v), ("output_mix", output_mix, v))
    return n, m


def _forward(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size=0):
    n, m = _check(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size)
    if n:
        launch(CONTRACT, CONTRACT.key(mhc_mult=m), input_mix.device, input_mix=input_mix.data_ptr(),
               mhc_scale=mhc_scale.data_ptr(), mhc_base=mhc_base.data_ptr(), output_mix=output_mix.data_ptr(),
               mhc_pre_eps=float(mhc_pre_eps), num_tokens=n)


@library_op("mhc_head_compute_mix_fwd", mutates_args=("output_mix",))
def _op(input_mix: torch.Tensor, mhc_scale: torch.Tensor, mhc_base: torch.Tensor, output_mix: torch.Tensor,
        mhc_pre_eps: float, token_block_size: int) -> None:
    _forward(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size)


@_op.register_fake
def _fake(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size):
    _check(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size, device=False)


def mhc_head_compute_mix_fwd(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps: float,
                             token_block_size: int = 0):
    """``output_mix = sigmoid(input_mix · mhc_scale[0] + mhc_base) + mhc_pre_eps`` into the preallocated
    ``output_mix`` ``[n, m]`` fp32; returns None. As tile_kernels 2.1 ``mhc.mhc_head_compute_mix_fwd`` (same bits:
    one fma, then the IEEE sigmoid). ``token_block_size`` is the peer's tiling knob; it changes nothing here."""
    if torch.compiler.is_compiling():
        return _op(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size)
    return _forward(input_mix, mhc_scale, mhc_base, output_mix, mhc_pre_eps, token_block_size)
