"""per_token_cast on an Ascend NPU: the call kernelkiln.quant.per_token_cast makes when ``x`` is on an NPU.

The public function validates the call once for both backends (kernelkiln.quant._per_token) and hands a plain input
on an NPU here. The Ascend kernel (kernels/quant/per_token_cast_ascend.py, declared as ``PER_TOKEN_CAST.ascend``)
casts bf16 rows to e4m3 / e2m1 with fp32 (optionally power-of-two) or packed UE8M0 scales, row- or column-major,
into the same output layouts as the CUDA kernels; the other forms of the call (fp32 or pre-quantized input, E4M3
scales, stochastic rounding) have no Ascend kernel and are refused here, naming the option.
"""
from kernelkiln import config
from kernelkiln._ops import ascend, checks
from kernelkiln_contract.quant import PER_TOKEN_CAST as CONTRACT

__all__ = []  # the Ascend path of kernelkiln.quant.per_token_cast; nothing public of its own


def _refuse(what):
    raise ValueError(f"per_token_cast on an Ascend NPU takes bf16 input with fp32 or packed UE8M0 scales; {what} "
                     "has no Ascend kernel (use a CUDA device for it)")


def per_token_cast(src, fmt, g, col_major, round_sf, packed, use_e4m3_sf, out, stochastic):
    """``(data, sf)`` of the validated plain input ``src`` (kernelkiln.quant._per_token._Source) on an NPU."""
    from kernelkiln.quant import _per_token as cuda_path  # the layouts and allocations are the CUDA path's

    if src.scales is not None:
        _refuse("pre-quantized (data, sf) input")
    if src.in_dtype != "bfloat16":
        _refuse(f"{src.in_dtype} input")
    if use_e4m3_sf:
        _refuse("use_e4m3_sf=True (E4M3 scales; the peer's Ascend kernels refuse it too)")
    if stochastic:
        _refuse("stochastic_cast=True")
    kind = "ue8m0" if packed else "fp32"
    values = ascend.variant(CONTRACT, in_dtype="bfloat16", fmt=fmt, num_per_channels=g, sf_kind=kind)
    t, h, x = src.t, src.h, src.data
    k_blocks = cuda_path._ceil_div(h, g)
    if out is not None:
        q, sf = checks.out_pair(out, col_major)
        cuda_path._check_q(q, src, fmt)
        cuda_path._check_sf_out(sf, src, g, kind, "out[1]")
    else:
        q = cuda_path._alloc_q(t, h, x.device, fmt)
        sf = cuda_path._sf_storage(t, k_blocks, cuda_path._SF_DTYPE[kind], col_major, x.device, packed)
    if t == 0:
        return q, sf
    if col_major:  # sf is the transpose of a [scale words, padded tokens] buffer
        sf_rows, sf_ld = sf.shape[1], sf.stride(1)
    else:
        sf_rows, sf_ld = t, (sf.stride(0) if t > 1 else sf.shape[1])
    ascend.launch(CONTRACT, values, x.device, x=x.data_ptr(), out=q.data_ptr(), sf=sf.data_ptr(), num_tokens=t,
                  hidden=h, x_ld=x.stride(0) if t > 1 else h, out_ld=q.stride(0) if t > 1 else q.shape[1],
                  sf_rows=sf_rows, sf_ld=sf_ld, round_sf=int(round_sf), sf_col_major=int(col_major),
                  clamp_min=config.get_amax_clamp_for_quant(fmt, False))
    return q, sf
