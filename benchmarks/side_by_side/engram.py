"""Side-by-side cases of the Engram family (tile_kernels 2.1 ``engram``, 9 ops) at the Engram model's shapes: 8192
tokens, hc 4, hidden 4096 and 7168; n-grams up to order 3 with 8 tables per order at 2 layers. The Sinkhorn
optimizer ops run on shapes of the peer's tests: 10001 rows x head dim 5120, momentum over 100001 x 512 elements.

Every op here is compared bit for bit (``tol=None``): the hash is integer arithmetic, the fused weight an exact
product, and the gate, the weight-gradient reduction and the Sinkhorn steps are deterministic (no atomics) and
reduce in the peer's own order, with the same partial counts (the SM count) on the same GPU.
"""
import math
from functools import partial

import torch

from .common import Calls, Case, into, sm_count

HC = 4                        # hc_mult
EPS, CLAMP = 1e-20, 1e-6      # the gate's RMS eps and clamp value, as in the peer's tests
SINKHORN_EPS, BETA1 = 1e-20, 0.95


def _bf16(*shape, device):
    return torch.randn(shape, device=device).to(torch.bfloat16)


# ---------------------------------------------------------------------------------------------------- hash, weight

def _hash(device, T, n, L, M, mask):
    ids = torch.randint(0, 129280, (T, n), dtype=torch.int32, device=device)  # token ids of a 129280-token vocab
    mult = torch.randint(1, 2 ** 40, (L, n), dtype=torch.int64, device=device)
    vocab = torch.randint(1000, 5 * 129280, (L, n - 1, M), dtype=torch.int32, device=device)
    sizes = vocab.flatten(1).long()
    offsets = (sizes.cumsum(1) - sizes).to(torch.int32)  # each table starts where the previous one ends
    image = torch.rand(T, device=device) < 0.1 if mask else None
    return Calls(run=lambda m: m.engram.engram_hash(ids, mult, vocab, offsets, image))


def _fused_weight(device, hc, H):
    wh, we = _bf16(hc, H, device=device), _bf16(hc, H, device=device)
    return Calls(run=lambda m: m.engram.fused_weight(wh, we))


# ---------------------------------------------------------------------------------------------------- gate

def _gate_inputs(device, T, H):
    x, kv = _bf16(T, HC, H, device=device), _bf16(T, HC + 1, H, device=device)
    wh = (torch.randn(HC, H, device=device) * 0.1 + 1).to(torch.bfloat16)
    we = (torch.randn(HC, H, device=device) * 0.1 + 1).to(torch.bfloat16)
    return x, kv, wh.float() * we.float()  # the fused weight is this exact product


def _gate_fwd(device, T, H, save_for_backward, inplace, mask):
    x, kv, wf = _gate_inputs(device, T, H)
    image = torch.rand(T, device=device) < 0.1 if mask else None
    if not inplace:
        return Calls(run=lambda m: m.engram.engram_gate_fwd(x, kv, wf, EPS, CLAMP, save_for_backward, image))
    # in place the output is hidden_states itself, so each package gates its own copy of x
    return into(lambda m, xi: m.engram.engram_gate_fwd(xi, kv, wf, EPS, CLAMP, save_for_backward, image,
                                                        inplace=True), x)


def _saved(x, kv, wf):
    """The forward's saved (dot, gate_score, rstd_x, rstd_k) [T, hc] in plain fp32 torch: the backward's inputs
    need only be plausible and the same for both packages, not any package's exact bits."""
    h = x.shape[-1]
    xf, kf = x.float(), kv[:, :HC].float()
    rstd_x = torch.rsqrt(xf.square().mean(-1) + EPS)
    rstd_k = torch.rsqrt(kf.square().mean(-1) + EPS)
    dot = (xf * wf * kf).sum(-1)
    d = dot * rstd_x * rstd_k * h ** -0.5
    gate = torch.sigmoid(torch.sign(d) * d.abs().clamp_min(CLAMP).sqrt())
    return dot, gate, rstd_x, rstd_k


def _gate_bwd(device, T, H):
    x, kv, wf = _gate_inputs(device, T, H)
    dot, gate, rstd_x, rstd_k = _saved(x, kv, wf)
    grad_out = torch.randn_like(x)
    return Calls(run=lambda m: m.engram.engram_gate_bwd(grad_out, x, kv, wf, dot, gate, rstd_x, rstd_k, CLAMP))


def _grad_w_reduce(device, hc, H):
    # the partial rows of the gate backward: one per SM
    partial_rows = torch.randn(sm_count(device), hc, H, device=device)
    wh, we = _bf16(hc, H, device=device), _bf16(hc, H, device=device)
    gh, ge = torch.randn(hc, H, device=device), torch.randn(hc, H, device=device)  # accumulated into
    return into(lambda m, gh, ge: (m.engram.grad_w_reduce(partial_rows, wh, we, gh, ge), gh, ge)[1:], gh, ge)


# ---------------------------------------------------------------------------------------------------- Sinkhorn

def _momentum(device, rows, row_size, grad_dtype, momentum_dtype, nesterov):
    numel = rows * row_size
    grad = torch.randn(numel, device=device).to(getattr(torch, grad_dtype))
    mom = torch.randn(numel, device=device).to(getattr(torch, momentum_dtype))  # updated in place
    return into(lambda m, mom: (m.engram.engram_sinkhorn_momentum_update(grad, mom, BETA1, nesterov), mom), mom)


def _matrix(device, rows, D):
    return (torch.randn(rows, D, device=device), torch.rand(rows, device=device), torch.rand(D, device=device))


def _step(device, rows, D):
    matrix, row_scale, col_scale = _matrix(device, rows, D)
    # row_scale is updated in place: compared with the returned row norms and column partials
    return into(lambda m, rs: (m.engram.engram_sinkhorn_step(matrix, rs, col_scale, SINKHORN_EPS), rs), row_scale)


def _step_reduce(device, D):
    partials = torch.rand(3 * sm_count(device), D, device=device)  # the step's 3 partial rows per SM
    col_sumsq = torch.full((D,), float("nan"), device=device)       # overwritten
    return into(lambda m, col: (m.engram.engram_sinkhorn_step_reduce(partials, col), col)[1], col_sumsq)


def _finalize(device, rows, D):
    matrix, row_scale, col_scale = _matrix(device, rows, D)
    alpha = math.sqrt(D)
    return Calls(run=lambda m: m.engram.engram_sinkhorn_finalize(matrix, row_scale, col_scale, SINKHORN_EPS, alpha))


def cases(quick=False):
    t = 256 if quick else 8192           # tokens
    rows = 256 if quick else 10001       # embedding-table rows of the Sinkhorn ops
    mom_rows = 256 if quick else 100001  # momentum: rows of 512 elements (51 M in all)

    def case(name, build, shown=None, **params):
        """``shown``: parameters named in the record only (derived from the device in build)."""
        return Case(f"engram.{name}", {**params, **(shown or {})}, partial(build, **params))

    yield case("engram_hash", _hash, T=t, n=3, L=2, M=8, mask=False)
    yield case("engram_hash", _hash, T=t, n=3, L=2, M=8, mask=True)
    yield case("fused_weight", _fused_weight, hc=HC, H=7168)
    yield case("engram_gate_fwd", _gate_fwd, T=t, H=4096, save_for_backward=True, inplace=False, mask=False)
    yield case("engram_gate_fwd", _gate_fwd, T=t, H=7168, save_for_backward=False, inplace=True, mask=True)
    for h in (4096, 7168):
        yield case("engram_gate_bwd", _gate_bwd, {"P": "SMs"}, T=t, H=h)
    yield case("grad_w_reduce", _grad_w_reduce, {"P": "SMs"}, hc=HC, H=7168)
    yield case("engram_sinkhorn_momentum_update", _momentum, rows=mom_rows, row_size=512, grad_dtype="bfloat16",
               momentum_dtype="float32", nesterov=True)
    yield case("engram_sinkhorn_step", _step, {"P": "3*SMs"}, rows=rows, D=5120)
    yield case("engram_sinkhorn_step_reduce", _step_reduce, {"P": "3*SMs"}, D=5120)
    yield case("engram_sinkhorn_finalize", _finalize, rows=rows, D=5120)
