"""PyTorch references (bit-exact oracles) of the v1-only per-channel ops with a transpose.

Not exported from ``kernelkiln.torch`` (v1 exported no reference under these names); import
them from this module. Both are ``cast(y, 'e4m3', (gm, 1), round_sf=...)`` of the value being
quantized (docs/SPEC.md §2.1, §4 items 2 and 11): the bf16 input itself, or the fp32 SwiGLU
output of ``kernelkiln.torch.swiglu_forward`` (same op order as the kernel; bit-identical on
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


def per_channel_cast_fused_ref(x, fmt, num_per_tokens, round_sf=False, num_per_channels=None, pos_to_token=None):
    """v1 per_channel_cast_fused: ``cast(rows, 'e4m3', (128, 1))`` of x's rows, gathered by pos_to_token.

    x: bf16 [T, H], or (e4m3 data [T, H], fp32 sf [T, H / 128]) with num_per_channels = 128 (re-scaled
    per-token -> per-channel: amax over data * sf, data multiplier sf * sf_inv as one product).
    pos_to_token [N] int32: output row n is x row pos_to_token[n]; -1 is a padding row, quantized as an
    all-zero row (data 0 and input scale 0), so it cannot raise its block's amax and stores 0x00.
    Returns (q [N or T, H] e4m3, sf [ceil(rows / 128), H] fp32)."""
    import torch

    quantized = isinstance(x, (tuple, list))
    data, sf = x if quantized else (x, None)
    if pos_to_token is not None:
        idx = pos_to_token.long()
        pad = idx < 0
        safe = idx.clamp(min=0)
        data = data[safe].view(torch.uint8).masked_fill(pad[:, None], 0).view(data.dtype)
        if quantized:
            sf = sf[safe].masked_fill(pad[:, None], 0.0)
    if quantized:
        return cast((data, sf), fmt, (num_per_tokens, 1), x_block_size=(1, num_per_channels), round_sf=round_sf)
    return cast(data, fmt, (num_per_tokens, 1), round_sf=round_sf)
