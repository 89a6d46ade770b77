"""v1's ``tile_kernels.torch.per_channel_cast_fused`` (module and function) with v1's signature: the E4M3 per-channel
cast of ``kernelkiln.torch.quant_v1.per_channel_cast_fused_ref``."""
from kernelkiln.torch.quant_v1 import per_channel_cast_fused_ref

__all__ = ["per_channel_cast_fused"]


def per_channel_cast_fused(x, num_per_tokens, num_per_channels, round_sf, pos_to_token):
    """``(q e4m3, sf fp32)`` of x's rows (bf16 ``[T, H]``, or ``(e4m3 data, fp32 sf [T, H/128])`` with
    num_per_channels = 128) gathered by pos_to_token (-1: an all-zero padding row), one scale per ``num_per_tokens``
    rows and channel."""
    return per_channel_cast_fused_ref(x, "e4m3", num_per_tokens, round_sf, num_per_channels, pos_to_token)
