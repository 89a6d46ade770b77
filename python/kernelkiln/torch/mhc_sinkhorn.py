"""References of the mHC Sinkhorn normalization and the fused inference pre-block (tile_kernels 2.1
``mhc_sinkhorn_fwd`` / ``mhc_sinkhorn_bwd`` / ``mhc_pre_big_fuse_fwd``).

``sinkhorn_normalize_ref`` is the peer's torch reference in semantics (its signature and defaults, plain torch
ops, differentiable): the tolerance oracle. ``mhc_sinkhorn_fwd_ref``, ``mhc_sinkhorn_bwd_ref`` and
``mhc_pre_big_fuse_fwd_ref`` compute what the kernels compute in the kernels' order (specification in
kernelkiln_contract.mhc_sinkhorn): sums in the xor-butterfly order that the peer's kernels lower to (``_sum``),
every +, ·, / correctly rounded in fp32 (through fp64, where double rounding is innocuous: torch's CPU fp32
division is not always IEEE), fma exactly rounded. On CUDA tensors they are bit-identical to the kernels (torch's
CUDA exp and rsqrt are expf and rsqrtf); on the CPU those two functions differ in the last bits, so there they
agree with the kernels to rounding.
"""
import torch

from kernelkiln.torch.fused import fma_f32

__all__ = ["sinkhorn_normalize_ref", "mhc_sinkhorn_fwd_ref", "mhc_sinkhorn_bwd_ref", "mhc_pre_big_fuse_fwd_ref"]


def sinkhorn_normalize_ref(x: torch.Tensor, repeat: int = 10, eps: float = 1e-6) -> torch.Tensor:
    """Softmax over the last dim + eps, a column normalization, then repeat - 1 rounds of row and column
    normalizations (divide by sum + eps); ``x [..., m, m]``, any float dtype, differentiable."""
    y = torch.softmax(x, dim=-1) + eps
    y = y / (y.sum(dim=-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        y = y / (y.sum(dim=-1, keepdim=True) + eps)
        y = y / (y.sum(dim=-2, keepdim=True) + eps)
    return y


def _f64(b):
    """A tensor operand, or a scalar rounded to fp32 first (the kernels take their scalars as fp32), in fp64."""
    if isinstance(b, torch.Tensor):
        return b.double()
    return float(torch.tensor(float(b), dtype=torch.float32))


def _add(a, b):
    return (a.double() + _f64(b)).float()


def _div(a, b):
    return (a.double() / _f64(b)).float()


def _mul(a, b):
    return (a.double() * _f64(b)).float()


def _sum(x, dim):
    """Σ over ``dim`` (-1: a row, -2: a column) in the kernels' butterfly order (TileLang's ``tl::AllReduce`` as
    the peer's kernel lowers it): every term starts as ``0 + v``, then the first half is added to the second half
    until one is left, e.g. ``(v0 + v2) + (v1 + v3)`` for m = 4; kept as a size-1 dim."""
    n = x.shape[dim]
    if n & (n - 1):
        raise ValueError(f"the butterfly sum needs a power-of-two m, got {n}")
    s = _add(x, 0.0)
    while n > 1:
        n //= 2
        s = _add(s.narrow(dim, 0, n), s.narrow(dim, n, n))
    return s

def _softmax(x):
    e = torch.exp(_add(x, -torch.amax(x, dim=-1, keepdim=True)))
    return _div(e, _sum(e, -1))


def _check_matrices(x, name="x"):
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 tensor")
    if x.dim() < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name} must have shape [..., m, m], got {tuple(x.shape)}")


def mhc_sinkhorn_fwd_ref(x: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    """mhc_sinkhorn_fwd in the kernel's order: a new tensor like ``x [..., m, m]`` fp32."""
    _check_matrices(x)
    y = _add(_softmax(x), eps)
    y = _div(y, _add(_sum(y, -2), eps))
    for _ in range(repeat - 1):
        y = _div(y, _add(_sum(y, -1), eps))
        y = _div(y, _add(_sum(y, -2), eps))
    return y


def mhc_sinkhorn_bwd_ref(grad_output: torch.Tensor, x: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    """mhc_sinkhorn_bwd in the kernel's order: the gradient with respect to the logits ``x`` (the forward's input),
    a new tensor like ``x``."""
    _check_matrices(x)
    _check_matrices(grad_output, "grad_output")
    states = [_softmax(x)]  # S_0; S_1 = S_0 + eps; S_h enters a column (odd h) or row (even h) division
    v = _add(states[0], eps)
    for h in range(1, 2 * repeat):
        states.append(v)
        dim = -2 if h % 2 else -1
        v = _div(v, _add(_sum(v, dim), eps))
    g = grad_output
    for h in range(2 * repeat - 1, 0, -1):
        u = states[h]
        dim = -2 if h % 2 else -1
        s = _add(_sum(u, dim), eps)
        t = _div(_sum(_mul(g, u), dim), s)
        g = _div(_add(g, -t), s)
    p = states[0]
    return _mul(_add(g, -_sum(_mul(g, p), -1)), p)


def _sigmoid(z):
    return _div(torch.ones_like(z), _add(torch.exp(-z), 1.0))


def mhc_pre_big_fuse_fwd_ref(gemm_out_mul, gemm_out_sqrsum, mhc_scale, mhc_base, residual, rms_eps, mhc_pre_eps,
                             mhc_sinkhorn_eps, mhc_post_mult_value, sinkhorn_repeat, n_splits=16):
    """mhc_pre_big_fuse_fwd in the kernel's order: ``(post_mix [n, m], comb_mix [n, m*m], layer_input [n, H] bf16)``
    from ``gemm_out_mul [S, n, m(m+2)]``, ``gemm_out_sqrsum [S, n]`` (S = n_splits), ``mhc_scale [3]``,
    ``mhc_base [m(m+2)]`` fp32 and ``residual [n, m, H]`` bf16."""
    n, m, h = residual.shape
    if gemm_out_mul.shape[0] != n_splits or gemm_out_sqrsum.shape[0] != n_splits:
        raise ValueError(f"the partials must have n_splits = {n_splits} rows")
    sq = torch.zeros(n, dtype=torch.float32, device=residual.device)
    acc = torch.zeros(n, m * (m + 2), dtype=torch.float32, device=residual.device)
    for s in range(n_splits):
        sq = _add(sq, gemm_out_sqrsum[s])
        acc = _add(acc, gemm_out_mul[s])
    r = torch.rsqrt(_add(_div(sq, float(m * h)), rms_eps))
    group = torch.clamp(torch.arange(m * (m + 2), device=residual.device) // m, max=2)
    z = fma_f32(_mul(acc, r.unsqueeze(-1)), mhc_scale[group], mhc_base)
    pre = _add(_sigmoid(z[:, :m]), mhc_pre_eps)
    post = _mul(_sigmoid(z[:, m:2 * m]), mhc_post_mult_value)
    comb = mhc_sinkhorn_fwd_ref(z[:, 2 * m:].reshape(n, m, m), sinkhorn_repeat, mhc_sinkhorn_eps).reshape(n, m * m)
    x = residual.float()
    o = _mul(pre[:, 0:1], x[:, 0])
    for i in range(1, m):
        o = fma_f32(pre[:, i:i + 1], x[:, i], o)
    return post, comb, o.to(torch.bfloat16)
