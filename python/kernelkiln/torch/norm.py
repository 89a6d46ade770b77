"""Bit-exact PyTorch references for RMSNorm forward / backward (docs/SPEC.md §3.2, §4 item 10).

Every fp32 operation below is one IEEE-rounded torch op on fp32 tensors (no fused
multiply-add), and every sum follows the kernels' fixed order, so results equal the
kernels' bit for bit on any device:

Row layout: a row of H elements is split into 16-byte chunks of VEC elements
(8 bf16 / 4 fp32); chunk k belongs to thread ``k % THREADS`` (THREADS = 128 for bf16,
256 for fp32) as its chunk number ``c = k // THREADS``, c < MAXC = 8 (so H <= 8192).
A row sum is: per thread, sequential over c = 0..7 and then the VEC elements of the
chunk, starting from +0; then an xor butterfly over each warp's 32 lanes with offsets
16, 8, 4, 2, 1 (``s += s[lane ^ off]``); then the warps' totals in warp order
``((w0 + w1) + w2) + ...``.

Forward: ``rstd = 1 / sqrt(sum(x*x) / H + eps)``; ``y = round((x * rstd) * (w * out_scale))``.
Backward: see ``norm_backward_ref``.
"""
import torch

from kernelkiln._formats import mega_moe_sf_rows, pack_ue8m0  # noqa: F401  (shared with the ops)

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "mega_moe_sf_ref",
    "mega_moe_sf_rows",
    "norm_backward_ref",
    "norm_forward_ref",
    "pack_ue8m0",
]

THREADS = {torch.bfloat16: 128, torch.float32: 256}
MAXC = 8
MAX_HIDDEN = 8192
REDUCE_WARPS = 8
_F32 = torch.float32


def _vec(dtype):
    return 16 // torch.empty((), dtype=dtype).element_size()


def _check(name, t, dtypes=(torch.bfloat16, torch.float32)):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f'{name} must be a torch.Tensor, got {type(t).__name__}')
    if t.dtype not in dtypes:
        raise TypeError(f'{name} has dtype {t.dtype}; allowed: {", ".join(str(d) for d in dtypes)}')


def _scalar(like, value):
    """A fp32 tensor of ``value`` rounded to fp32 once (what the kernel receives as a float arg)."""
    return torch.full(like.shape[:-1] + (1,), float(value), dtype=_F32, device=like.device)


def row_sum(terms, dtype):
    """Sum fp32 ``terms [N, H]`` per row in the kernels' fixed order (module docstring)."""
    n, h = terms.shape
    threads, vec = THREADS[dtype], _vec(dtype)
    if h > MAXC * threads * vec:
        raise ValueError(f'hidden size {h} exceeds {MAXC * threads * vec}')
    padded = terms.new_zeros((n, MAXC * threads * vec))
    padded[:, :h] = terms
    chunks = padded.view(n, MAXC, threads, vec)
    acc = torch.zeros((n, threads), dtype=_F32, device=terms.device)
    for c in range(MAXC):
        for i in range(vec):
            acc = acc + chunks[:, c, :, i]
    lanes = torch.arange(32, device=terms.device)
    warps = acc.view(n, threads // 32, 32)
    for off in (16, 8, 4, 2, 1):
        warps = warps + warps[:, :, lanes ^ off]
    total = warps[:, 0, 0]
    for w in range(1, threads // 32):
        total = total + warps[:, w, 0]
    return total


def _div(a, b):
    """Correctly rounded fp32 a / b on every device: through fp64 (53 >= 2*24 + 2 bits, so the
    double rounding is innocuous). torch's CPU fp32 kernels were measured 1 ulp off the IEEE
    result the kernels (__fdiv_rn / __fsqrt_rn) and torch's CUDA ops give."""
    return (a.double() / b.double()).float()


def _sqrt(v):
    """Correctly rounded fp32 sqrt on every device (through fp64, as ``_div``)."""
    return torch.sqrt(v.double()).float()


def _weight_factor(weight, x2d, out_scale):
    """fp32 ``w * out_scale`` (or ``out_scale``) broadcastable to ``x2d``."""
    s = torch.full((1, 1), float(out_scale), dtype=_F32, device=x2d.device)
    if weight is None:
        return s
    return weight.to(_F32).view(1, -1) * s


def _rstd(x2d, eps):
    x32 = x2d.to(_F32)
    total = row_sum(x32 * x32, x2d.dtype)
    h = torch.full_like(total, float(x2d.shape[1]))
    e = torch.full_like(total, float(eps))
    return _div(torch.ones_like(total), _sqrt(_div(total, h) + e))


def norm_forward_ref(x, weight, eps, residual=None, out_scale=1.0):
    """RMSNorm with optional fused residual add; returns ``(out, rstd, norm_input)``.

    x: ``[T, H]`` or ``[B, T, H]`` bf16/fp32 (H <= 8192); weight ``[H]`` same dtype or None;
    residual like x. ``norm_input = round(x + residual)`` (or x). ``out`` has x.dtype and
    ``rstd`` is fp32 of shape ``x.shape[:-1]``.
    """
    _check('x', x)
    if weight is not None:
        _check('weight', weight, (x.dtype,))
    h = x.shape[-1]
    x2d = x.reshape(-1, h)
    if residual is not None:
        _check('residual', residual, (x.dtype,))
        x2d = (x2d.to(_F32) + residual.reshape(-1, h).to(_F32)).to(x.dtype)
    rstd = _rstd(x2d, eps)
    wf = _weight_factor(weight, x2d, out_scale)
    out = ((x2d.to(_F32) * rstd.view(-1, 1)) * wf).to(x.dtype)
    norm_input = x2d.view(x.shape) if residual is not None else x
    return out.view(x.shape), rstd.view(x.shape[:-1]), norm_input


def dw_partials(x, out_grad, rstd, out_scale, num_partials):
    """Per-CTA fp32 partials ``[P, H]``: CTA p sums the rows p, p + P, ... in row order from +0."""
    t, h = x.shape
    xh = x.to(_F32) * rstd.view(-1, 1)
    terms = (xh * out_grad.to(_F32)) * torch.full((1, 1), float(out_scale), dtype=_F32, device=x.device)
    acc = torch.zeros((num_partials, h), dtype=_F32, device=x.device)
    rounds = -(-t // num_partials)
    padded = terms.new_zeros((rounds * num_partials, h))
    padded[:t] = terms
    padded = padded.view(rounds, num_partials, h)
    for j in range(rounds):
        # Rows past T contribute +0, which leaves a sum unchanged (it is never -0).
        acc = acc + padded[j]
    return acc


def reduce_partials(partials):
    """``dw [H]`` from ``[P, H]`` partials: warp w of 8 sums the contiguous range
    ``[w*per, (w+1)*per)`` (per = ceil(P/8)) from +0, then the 8 sums in warp order."""
    p, h = partials.shape
    per = -(-p // REDUCE_WARPS)
    padded = partials.new_zeros((per * REDUCE_WARPS, h))
    padded[:p] = partials
    ranges = padded.view(REDUCE_WARPS, per, h)
    s = torch.zeros((REDUCE_WARPS, h), dtype=_F32, device=partials.device)
    for j in range(per):
        s = s + ranges[:, j]
    total = s[0]
    for w in range(1, REDUCE_WARPS):
        total = total + s[w]
    return total


def norm_backward_ref(out_grad, x, weight, rstd, residual_out_grad=None, out_scale=1.0, weight_grad=None,
                      num_partials=1):
    """RMSNorm backward; returns ``(x_grad, weight_grad or None)``.

    ``xh = x * rstd``, ``g = dy * (w * out_scale)``, ``mean = row_sum(xh * g) / H``,
    ``dx = (g - xh * mean) * rstd (+ residual_out_grad)`` rounded to x.dtype. The weight
    gradient follows the kernels' two-level fixed order over ``num_partials`` CTAs
    (``dw_partials`` then ``reduce_partials``); pass the P the op used
    (``kernelkiln.quant.norm_backward_num_partials()``) to compare bit for bit. When
    weight_grad is given, ``round(float(weight_grad) + dw)`` is returned (a new tensor; the
    reference does not modify its inputs). Without weight the weight gradient is None.
    """
    _check('x', x)
    _check('out_grad', out_grad, (x.dtype,))
    _check('rstd', rstd, (_F32,))
    if x.dim() != 2:
        raise ValueError(f'x must be 2-D, got shape {tuple(x.shape)}')
    t, h = x.shape
    xh = x.to(_F32) * rstd.view(-1, 1)
    wf = _weight_factor(weight, x, out_scale)
    g = out_grad.to(_F32) * wf
    total = row_sum(xh * g, x.dtype)
    mean = _div(total, torch.full_like(total, float(h))).view(-1, 1)
    dx = (g - xh * mean) * rstd.view(-1, 1)
    if residual_out_grad is not None:
        dx = dx + residual_out_grad.to(_F32)
    dx = dx.to(x.dtype)
    if weight is None:
        return dx, None
    dw = reduce_partials(dw_partials(x, out_grad, rstd, out_scale, num_partials))
    if weight_grad is None:
        return dx, dw.to(weight.dtype)
    return dx, (weight_grad.to(_F32) + dw).to(weight_grad.dtype)


def mega_moe_sf_ref(packed_sf, mega_moe_sf, block_m):
    """Write packed UE8M0 scales (int32 [N, H / 128], token order) into ``mega_moe_sf`` in place, each
    token's word row at ``mega_moe_sf_rows``; other rows are left as they are. Returns ``mega_moe_sf``."""
    rows, _ = mega_moe_sf_rows(packed_sf.shape[0], block_m, packed_sf.device)
    mega_moe_sf[rows] = packed_sf
    return mega_moe_sf
