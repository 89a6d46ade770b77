"""References of the Engram Sinkhorn optimizer ops (tile_kernels 2.1 ``engram.engram_sinkhorn_*``).

Two kinds:

* the peer's references, same names and signatures (``engram_sinkhorn_momentum_update_ref``,
  ``engram_sinkhorn_step_ref``, ``engram_sinkhorn_finalize_ref``), with the semantics of their CUDA branch (the
  peer's Ascend branch computes the Nesterov output as ``(1 - beta1) * g + beta1 * m`` with two roundings; there is
  no Ascend backend here yet, so that branch is not reproduced). The momentum reference is bitwise the kernel; the
  step and finalize references divide where the kernels multiply by a reciprocal and sum in torch's order, so they
  agree with the kernels to fp32 rounding only (the peer's tests use assert_close);
* ordered references (``*_ordered``) that reproduce the kernels' bits on any device: every fp32 operation in the
  kernel's order, with exactly rounded fmas (``fma_f32``) and the per-thread / butterfly order of the row norms for
  the arch (``arch="sm_90"`` or ``"sm_100"``; see kernelkiln_contract.engram_sinkhorn).

Imports only torch.
"""
import torch

from kernelkiln.torch.fused import fma_f32

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "engram_sinkhorn_finalize_ordered",
    "engram_sinkhorn_finalize_ref",
    "engram_sinkhorn_momentum_update_ref",
    "engram_sinkhorn_row_sumsq_ordered",
    "engram_sinkhorn_step_ordered",
    "engram_sinkhorn_step_reduce_ordered",
    "engram_sinkhorn_step_ref",
]

_VEC = 8
_THREADS = (128, 64, 32)
ARCHES = ("sm_90", "sm_100")


def _f32(v, like):
    return torch.tensor(v, dtype=torch.float32, device=like.device)


def engram_sinkhorn_momentum_update_ref(grad, momentum_buffer, beta1, nesterov=True):
    """Updates ``momentum_buffer`` in place and returns the fp32 Sinkhorn input (shaped like momentum_buffer).

    ``m' = fma(m, beta1, round((1 - beta1) * g))`` in fp32 (beta1 and 1 - beta1 each rounded to fp32 from the
    Python double), stored rounded to the buffer's dtype; returns ``fma(g, 1 - beta1, round(beta1 * m'))`` with
    Nesterov, else ``m'`` before that rounding. Bitwise the kernel (and the peer's CUDA reference, whose
    ``add(alpha=)`` is the same fma)."""
    g = grad.to(torch.float32).reshape(momentum_buffer.shape)
    m = momentum_buffer.to(torch.float32)
    b, w = _f32(beta1, g), _f32(1.0 - beta1, g)
    m_new = fma_f32(m, b, g * w)
    momentum_buffer.copy_(m_new)
    if nesterov:
        return fma_f32(g, w, m_new * b)
    return m_new


def engram_sinkhorn_step_ref(matrix, row_scale, col_scale, col_sumsq, eps):
    """The peer's reference step: ``row_norm`` of ``x = r * A * c`` per row (returned), ``row_scale /= row_norm +
    eps`` in place, and ``col_sumsq`` overwritten with the column sums of the new iterate's squares."""
    x = row_scale[:, None] * matrix * col_scale
    row_norm = torch.linalg.vector_norm(x, ord=2, dim=1)
    row_scale.div_(row_norm + eps)
    col_sumsq.copy_((row_scale[:, None] * matrix * col_scale).square().sum(dim=0))
    return row_norm


def engram_sinkhorn_finalize_ref(matrix, row_scale, col_scale, eps, alpha, out=None):
    """The peer's reference finalize: ``alpha * (r / (norm(r * A * c) + eps)) * A * c`` per row (into ``out`` if
    given); row_scale is not modified."""
    x = row_scale[:, None] * matrix * col_scale
    scale = row_scale / (torch.linalg.vector_norm(x, ord=2, dim=1) + eps)
    result = alpha * scale[:, None] * matrix * col_scale
    if out is None:
        return result
    out.copy_(result)
    return out


def _threads(head_dim):
    for t in _THREADS:
        if head_dim % (t * _VEC) == 0:
            return t
    raise ValueError(f"head_dim must be a positive multiple of 256, got {head_dim}")


def engram_sinkhorn_row_sumsq_ordered(x, arch):
    """Per row of ``x`` [R, D] fp32 (the rounded iterate), its sum of squares in the kernels' order for ``arch``.

    Thread t of T (the first of 128, 64, 32 dividing D into 8-column chunks) holds columns k*T*8 + t*8 + i; it sums
    from +0 element-major (i outer, chunk k inner): sm_90 one exactly rounded fma(x, x, s) per term; sm_100
    s + round(x * x), and with one chunk two chains (even i, odd i) added even + odd. The thread sums are then
    combined by a xor butterfly from T/2 down to 1 (s_t + s_(t^off), fp32)."""
    if arch not in ARCHES:
        raise ValueError(f"arch must be one of {list(ARCHES)}, got {arch!r}")
    rows, d = x.shape
    t = _threads(d)
    c = d // (t * _VEC)
    # [R, T, 8 * C]: each thread's terms in its summation order (i outer, k inner)
    terms = x.reshape(rows, c, t, _VEC).permute(0, 2, 3, 1).reshape(rows, t, _VEC * c)
    zero = torch.zeros((rows, t), dtype=torch.float32, device=x.device)
    if arch == "sm_90":
        s = zero
        for j in range(_VEC * c):
            s = fma_f32(terms[..., j], terms[..., j], s)
    elif c == 1:
        even, odd = zero, zero
        for j in range(0, _VEC, 2):
            even = even + terms[..., j] * terms[..., j]
            odd = odd + terms[..., j + 1] * terms[..., j + 1]
        s = even + odd
    else:
        s = zero
        for j in range(_VEC * c):
            s = s + terms[..., j] * terms[..., j]
    lane = torch.arange(t, device=x.device)
    off = t // 2
    while off:
        s = s + s[:, lane ^ off]
        off //= 2
    return s[:, 0]


def _iterate(matrix, row_scale, col_scale):
    return (row_scale[:, None] * matrix) * col_scale  # two fp32 roundings, the kernels' order


def engram_sinkhorn_step_ordered(matrix, row_scale, col_scale, eps, num_partials, arch):
    """The step kernel's result bit for bit: returns ``(row_norm [R], col_sumsq_partial [P, D])`` and updates
    ``row_scale`` in place to ``r * (1 / (norm + eps))``. Partial row p holds, from +0 in row order, the fmas
    ``fma(y, y, acc)`` with ``y = round(x * inv)`` of the rows [p*ceil(R/P), min((p+1)*ceil(R/P), R))."""
    rows, d = matrix.shape
    x = _iterate(matrix, row_scale, col_scale)
    norm = torch.sqrt(engram_sinkhorn_row_sumsq_ordered(x, arch))
    inv = 1.0 / (norm + _f32(eps, norm))
    y = x * inv[:, None]
    row_scale.copy_(row_scale * inv)
    per = -(-rows // num_partials) if rows else 0
    acc = torch.zeros((num_partials, d), dtype=torch.float32, device=matrix.device)
    if per:
        # pad to P * per rows with +0: fma(0, 0, acc) leaves acc's bits as they are
        padded = torch.zeros((num_partials * per, d), dtype=torch.float32, device=matrix.device)
        padded[:rows] = y
        padded = padded.view(num_partials, per, d)
        for j in range(per):
            acc = fma_f32(padded[:, j], padded[:, j], acc)
    return norm, acc


def engram_sinkhorn_step_reduce_ordered(col_sumsq_partial):
    """``sum_p col_sumsq_partial[p]`` in fp32, strictly in p order from +0 (the step_reduce kernel's bits)."""
    s = torch.zeros(col_sumsq_partial.shape[1], dtype=torch.float32, device=col_sumsq_partial.device)
    for p in range(col_sumsq_partial.shape[0]):
        s = s + col_sumsq_partial[p]
    return s


def engram_sinkhorn_finalize_ordered(matrix, row_scale, col_scale, eps, alpha, arch):
    """The finalize kernel's result bit for bit: ``round(x * k)`` with ``x`` the rounded iterate and
    ``k = alpha / (sqrtf(sum x^2) + eps)`` (the sum in the kernels' order for ``arch``)."""
    x = _iterate(matrix, row_scale, col_scale)
    norm = torch.sqrt(engram_sinkhorn_row_sumsq_ordered(x, arch))
    k = _f32(alpha, x) / (norm + _f32(eps, x))
    return x * k[:, None]
