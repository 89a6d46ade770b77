"""References of the v1 pre-norm projection ops (``mhc_pre_norm_fn_fwd_mul`` / ``mhc_pre_norm_fn_bwd_mul``; the
specification is kernelkiln_contract.mhc_norm_fn), torch only, on any device.

The GEMMs run on TF32 tensor cores in the hardware's order, so their references are float64 results of the same
products: each fp32 operand reduced to the 19 bits the tensor core reads (``tf32_operand``), bf16 values exact. With
``magnitudes=True`` they return the sums of the terms' absolute values instead, the scale of the tests' error bounds.
The forward's sum of squares is computed in the kernel's own order (fp32, bit-identical). ``round_to_tf32`` is the
callers' rounding (kernelkiln._formats), re-exported here.
"""
import torch

from kernelkiln._formats import round_to_tf32

__all__ = ["round_to_tf32", "tf32_operand", "mhc_pre_norm_fn_fwd_mul_ref", "mhc_pre_norm_fn_bwd_mul_ref",
           "sqrsum_ordered_ref"]

_SQ_LANES = 4  # kernelkiln_contract.mhc_norm_fn.SQ_LANES
_TF32_DROPPED = 0x1FFF  # the 13 low mantissa bits a TF32 tensor core ignores


def tf32_operand(x):
    """The fp32 value a TF32 tensor core reads from the fp32 tensor ``x``: its low 13 bits cleared (truncation;
    the identity on values ``round_to_tf32`` produced, up to those ignored bits)."""
    return (x.float().contiguous().view(torch.int32) & ~_TF32_DROPPED).view(torch.float32)


def sqrsum_ordered_ref(x):
    """Σ_k x[t, k]² of x ``[n, K]`` in the forward kernel's order, fp32: 4 partial sums over the columns k ≡ l
    (mod 4) in increasing k from +0, then ``(s0 + s2) + (s1 + s3)``. Returns ``[n]`` fp32."""
    xf = x.float()
    n, k = xf.shape
    if k % _SQ_LANES:
        raise ValueError(f"x.shape[1] must be a multiple of {_SQ_LANES}, got {k}")
    s = torch.zeros(n, _SQ_LANES, dtype=torch.float32, device=x.device)
    for c in range(0, k, _SQ_LANES):
        piece = xf[:, c:c + _SQ_LANES]
        s = s + piece * piece  # the square of a bf16 value is exact in fp32: the kernel's fma is this add
    return (s[:, 0] + s[:, 2]) + (s[:, 1] + s[:, 3])


def mhc_pre_norm_fn_fwd_mul_ref(x, fn, magnitudes=False):
    """``(out_mul [n, 1, m3] float64, sqrsum [n, 1] fp32)`` for x ``[n, K]`` bf16 and fn ``[m3, K]`` fp32: out_mul =
    x · tf32_operand(fn)ᵀ exact in float64 (the kernel's is that sum accumulated in fp32 by the tensor cores), sqrsum
    in the kernel's order (bit-identical). ``magnitudes``: out_mul = Σ_k |x·fn| instead (sqrsum unchanged)."""
    a = x.double()
    f = tf32_operand(fn).double()
    if magnitudes:
        a, f = a.abs(), f.abs()
    out_mul = (a @ f.t()).unsqueeze(1)
    return out_mul, sqrsum_ordered_ref(x).unsqueeze(1)


def mhc_pre_norm_fn_bwd_mul_ref(out_mul_grad, sqrsum_grad, x, fn, x_grad, magnitudes=False):
    """``(x_grad_new [n, K] float64, fn_grad [m3, K] float64)``: the backward's results before their last rounding,
    exact in float64 from the operands the tensor cores read, ``x_grad_new = x_grad + g · f + 2·x·sqrsum_grad`` and
    ``fn_grad = gᵀ · x`` with g = tf32_operand(out_mul_grad) ``[n, m3]``, f = tf32_operand(fn). The kernel rounds
    x_grad_new to bf16 (its fp32 sums carry the tensor cores' rounding) and writes fn_grad as its fp32 sum.
    ``magnitudes``: the same sums of the terms' absolute values (the fp32 error bounds' scale)."""
    n, k = x.shape
    g = tf32_operand(out_mul_grad.reshape(n, -1)).double()
    f = tf32_operand(fn).double()
    a = x.double()
    old = x_grad.double()
    sg = sqrsum_grad.reshape(n, 1).double()
    if magnitudes:
        g, f, a, old, sg = g.abs(), f.abs(), a.abs(), old.abs(), sg.abs()
    x_grad_new = old + g @ f + 2 * a * sg
    fn_grad = g.t() @ a
    return x_grad_new, fn_grad
