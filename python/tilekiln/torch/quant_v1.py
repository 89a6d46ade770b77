"""PyTorch references (bit-exact oracles) of the v1-only per-channel ops with a transpose.

Not exported from ``tilekiln.torch`` (v1 exported no reference under these names); import
them from this module. Both are ``cast(y, 'e4m3', (gm, 1), round_sf=...)`` of the value being
quantized (OPERATORS.md §2.1, §4 items 2 and 11): the bf16 input itself, or the fp32 SwiGLU
output of ``tilekiln.torch.swiglu_forward`` (same op order as the kernel; bit-identical on
CUDA, while CPU ``exp`` may differ in the last bit).
"""
from .quant import cast
from .swiglu import swiglu_forward


def per_channel_cast_and_transpose_ref(x, fmt, num_per_tokens, round_sf=False):
    """(q [H, T] e4m3 contiguous, sf [T/gm, H] fp32) for x [T, H]."""
    q, sf = cast(x, fmt, (num_per_tokens, 1), round_sf=round_sf)
    return q.t().contiguous(), sf


def swiglu_forward_and_per_channel_cast_and_transpose_ref(x, fmt, num_per_tokens, round_sf=False,
                                                          without_transpose=False, swiglu_clamp_value=None):
    """(q [I, T] or [T, I] e4m3, sf [T/gm, I] fp32) for x [T, 2I] (gate = left half, up = right half)."""
    y = swiglu_forward(x, clamp_value=swiglu_clamp_value)
    q, sf = cast(y, fmt, (num_per_tokens, 1), round_sf=round_sf)
    return (q if without_transpose else q.t().contiguous()), sf
