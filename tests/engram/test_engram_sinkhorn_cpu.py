"""Engram Sinkhorn ops on the CPU: our references against the peer's (tile_kernels 2.1.0's torch/engram.py, loaded by
path from its wheel, never copied), the ordered references against independent scalar emulations of the kernels'
order, the contract's thread choice, and every argument error of the public functions."""
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkiln.engram import (engram_sinkhorn_finalize, engram_sinkhorn_momentum_update, engram_sinkhorn_step,
                               engram_sinkhorn_step_reduce)
from kernelkiln.torch import (engram_sinkhorn_finalize_ordered, engram_sinkhorn_finalize_ref,
                              engram_sinkhorn_momentum_update_ref, engram_sinkhorn_row_sumsq_ordered,
                              engram_sinkhorn_step_ordered, engram_sinkhorn_step_reduce_ordered,
                              engram_sinkhorn_step_ref)
from kernelkiln_contract.engram_sinkhorn import CONTRACTS, sinkhorn_threads


@pytest.fixture(scope="module")
def peer(peer_engram):
    """The peer's torch/engram.py (tests/engram/conftest.py)."""
    return peer_engram


def _bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


SPECIALS = [None, float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3e38, 1e-40]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


# ---------------------------------------------------------------------------------------------------- momentum


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), gdt=st.sampled_from(list(DTYPES)), mdt=st.sampled_from(list(DTYPES)),
       nesterov=st.booleans(), beta=st.sampled_from([0.95, 0.9, 0.0, 1.0, 0.123456789, 0.999]),
       special=st.sampled_from(SPECIALS), seed=st.integers(0, 2**16))
def test_momentum_reference_is_the_peers_bitwise(peer, rows, gdt, mdt, nesterov, beta, special, seed):
    # The peer's add(alpha=) is one fma on CUDA and in torch's vectorized CPU kernel (numel % 256 == 0 keeps every
    # element on the vector path), so both references must agree bit for bit.
    g = torch.Generator().manual_seed(seed)
    grad = (torch.randn(rows * 256, generator=g) * 4).to(DTYPES[gdt])
    mom = (torch.randn(rows * 256, generator=g) * 4).to(DTYPES[mdt])
    if special is not None:
        grad[seed % grad.numel()] = special
        mom[(seed * 7) % mom.numel()] = special
    mom_ours, mom_peer = mom.clone(), mom.clone()
    ours = engram_sinkhorn_momentum_update_ref(grad, mom_ours, beta, nesterov)
    want = peer.engram_sinkhorn_momentum_update_ref(grad, mom_peer, beta, nesterov)
    assert ours.dtype == want.dtype == torch.float32 and ours.shape == want.shape
    assert torch.equal(_bits(ours), _bits(want))
    assert torch.equal(_bits(mom_ours), _bits(mom_peer))


def test_momentum_reference_rounds_twice():
    # m' = fma(m, b, round(w * g)): the product w * g is rounded before the fma (a single fma of both products
    # would differ here), and the non-Nesterov output is m' before its rounding to bf16.
    grad = torch.full((256,), 1.0 + 2**-20, dtype=torch.float32)
    mom = torch.full((256,), 3.0 + 2**-21, dtype=torch.bfloat16)
    m32 = mom.float()
    out = engram_sinkhorn_momentum_update_ref(grad, mom, 0.3, nesterov=False)
    b, w = torch.tensor(0.3, dtype=torch.float32).double(), torch.tensor(1.0 - 0.3, dtype=torch.float32).double()
    exact_one_rounding = (m32.double() * b + w * grad.double()).float()
    prod = (grad * torch.tensor(1.0 - 0.3, dtype=torch.float32)).double()
    two_roundings = (m32.double() * b + prod).float()
    assert torch.equal(out, two_roundings)
    assert not torch.equal(out, exact_one_rounding)
    assert torch.equal(mom, out.to(torch.bfloat16))


# ---------------------------------------------------------------------------------------------------- step / finalize


def _f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def _scalar_sumsq(row, arch):
    """One row's sum of squares by plain scalar loops over the kernel's thread layout (fp32 rounding by struct;
    fma rounded once from the exact double product, which is exact for fp32 inputs)."""
    d = len(row)
    t = sinkhorn_threads(d)
    c = d // (t * 8)
    sums = []
    for th in range(t):
        vals = [[row[k * t * 8 + th * 8 + i] for k in range(c)] for i in range(8)]
        if arch == "sm_100" and c == 1:
            e = o = 0.0
            for i in range(0, 8, 2):
                e = _f32(e + _f32(vals[i][0] * vals[i][0]))
                o = _f32(o + _f32(vals[i + 1][0] * vals[i + 1][0]))
            s = _f32(e + o)
        else:
            s = 0.0
            for i in range(8):
                for k in range(c):
                    v = vals[i][k]
                    if arch == "sm_90":
                        from fractions import Fraction
                        s = _f32(float(Fraction(v) * Fraction(v) + Fraction(s)))
                    else:
                        s = _f32(s + _f32(v * v))
        sums.append(s)
    off = t // 2
    while off:
        sums = [_f32(sums[i] + sums[i ^ off]) for i in range(t)]
        off //= 2
    return sums[0]


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("d", [256, 512, 768, 1024, 1536])
def test_row_sumsq_order_matches_a_scalar_emulation(arch, d):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(3, d, generator=g) * torch.logspace(-3, 3, d)  # wide magnitudes: the order shows in the bits
    got = engram_sinkhorn_row_sumsq_ordered(x, arch)
    for r in range(3):
        want = _scalar_sumsq([float(v) for v in x[r]], arch)
        assert struct.pack("f", float(got[r])) == struct.pack("f", want), (arch, d, r)


def test_row_sumsq_arches_differ():
    # The per-arch order is not cosmetic: some rows sum to different bits on sm_90 and sm_100.
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 256, generator=g) * torch.logspace(-4, 4, 256)
    a, b = (engram_sinkhorn_row_sumsq_ordered(x, arch) for arch in ("sm_90", "sm_100"))
    assert not torch.equal(a, b)
    torch.testing.assert_close(a, b)


def test_row_sumsq_rejects_unknown_arch():
    with pytest.raises(ValueError, match="arch"):
        engram_sinkhorn_row_sumsq_ordered(torch.zeros(1, 256), "sm_80")


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 40), d=st.sampled_from([256, 512, 768, 1024, 1280, 2048]), parts=st.integers(1, 9),
       arch=st.sampled_from(["sm_90", "sm_100"]), seed=st.integers(0, 2**16))
def test_step_ordered_agrees_with_the_peers_reference(peer, rows, d, parts, arch, seed):
    g = torch.Generator().manual_seed(seed)
    matrix = torch.randn(rows, d, generator=g)
    row_scale = torch.rand(rows, generator=g)
    col_scale = torch.rand(d, generator=g)
    rs_ours, rs_peer = row_scale.clone(), row_scale.clone()
    col_sumsq = torch.full((d,), float("nan"))
    norm_peer = peer.engram_sinkhorn_step_ref(matrix, rs_peer, col_scale, col_sumsq, 1e-20)
    norm, partial = engram_sinkhorn_step_ordered(matrix, rs_ours, col_scale, 1e-20, parts, arch)
    assert partial.shape == (parts, d) and norm.shape == (rows,)
    torch.testing.assert_close(norm, norm_peer)
    torch.testing.assert_close(rs_ours, rs_peer)
    torch.testing.assert_close(engram_sinkhorn_step_reduce_ordered(partial), col_sumsq, rtol=3e-6, atol=1e-5)
    # CTA p owns rows [p*ceil(R/P), ...): a CTA past the last row holds zeros
    per = -(-rows // parts) if rows else 0
    for p in range(parts):
        if p * per >= rows:
            assert torch.equal(partial[p], torch.zeros(d))
    # our peer-named reference is the peer's, bit for bit
    rs2, cs2 = row_scale.clone(), torch.empty(d)
    assert torch.equal(engram_sinkhorn_step_ref(matrix, rs2, col_scale, cs2, 1e-20), norm_peer)
    assert torch.equal(rs2, rs_peer) and torch.equal(cs2, col_sumsq)


def test_step_ordered_uses_the_reciprocal_and_the_old_iterate():
    # row_scale = r * (1 / (n + eps)), not r / (n + eps); the partials square x * inv, not the recomputed iterate.
    matrix = torch.tensor([[3.0] + [0.0] * 255, [0.1] * 256])
    row_scale = torch.tensor([0.7, 1.3])
    col_scale = torch.full((256,), 1.1)
    rs = row_scale.clone()
    norm, partial = engram_sinkhorn_step_ordered(matrix, rs, col_scale, 1e-20, 1, "sm_90")
    x = (row_scale[:, None] * matrix) * col_scale
    inv = 1.0 / (norm + torch.tensor(1e-20))
    assert torch.equal(rs, row_scale * inv)
    y = x * inv[:, None]
    want = torch.zeros(256)
    for r in range(2):
        want = (y[r].double() * y[r].double() + want.double()).float()
    assert torch.equal(partial[0], want)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 30), d=st.sampled_from([256, 512, 768, 1024, 1536, 2048]),
       arch=st.sampled_from(["sm_90", "sm_100"]), special=st.sampled_from(SPECIALS), seed=st.integers(0, 2**16))
def test_finalize_ordered_agrees_with_the_peers_reference(peer, rows, d, arch, special, seed):
    g = torch.Generator().manual_seed(seed)
    matrix = torch.randn(rows, d, generator=g)
    row_scale = torch.rand(rows, generator=g)
    col_scale = torch.rand(d, generator=g)
    if special is not None and rows:
        matrix[seed % rows, seed % d] = special
    alpha = d ** 0.5
    want = peer.engram_sinkhorn_finalize_ref(matrix, row_scale, col_scale, 1e-20, alpha)
    got = engram_sinkhorn_finalize_ordered(matrix, row_scale, col_scale, 1e-20, alpha, arch)
    torch.testing.assert_close(got, want, equal_nan=True)
    out = torch.full((rows, d), float("nan"))
    assert engram_sinkhorn_finalize_ref(matrix, row_scale, col_scale, 1e-20, alpha, out) is out
    assert torch.equal(_bits(out), _bits(want))


@settings(max_examples=30, deadline=None)
@given(parts=st.integers(0, 50), d=st.sampled_from([256, 512]), seed=st.integers(0, 2**16))
def test_step_reduce_ordered_is_sequential(parts, d, seed):
    g = torch.Generator().manual_seed(seed)
    partial = torch.rand(parts, d, generator=g) * torch.logspace(-6, 6, parts or 1)[:parts, None]
    got = engram_sinkhorn_step_reduce_ordered(partial)
    want = torch.zeros(d)
    for p in range(parts):
        want = want + partial[p]
    assert torch.equal(got, want)
    torch.testing.assert_close(got, partial.sum(0) if parts else torch.zeros(d), rtol=3e-6, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- contract


@pytest.mark.parametrize("d,t", [(256, 32), (512, 64), (768, 32), (1024, 128), (1536, 64), (5120, 128), (2816, 32)])
def test_threads_choice_is_the_peers(d, t):
    assert sinkhorn_threads(d) == t


@pytest.mark.parametrize("d", [128, 100, 255, 257])
def test_threads_choice_rejects_other_head_dims(d):
    with pytest.raises(ValueError, match="multiple of 256"):
        sinkhorn_threads(d)


def test_contracts_have_specs_and_representatives():
    assert [c.op for c in CONTRACTS] == ["engram_sinkhorn_momentum_update", "engram_sinkhorn_step",
                                         "engram_sinkhorn_step_reduce", "engram_sinkhorn_finalize"]
    for c in CONTRACTS:
        assert len(c.doc) > 300 and c.representative is not None


# ---------------------------------------------------------------------------------------------------- argument errors

F32 = torch.float32


def _mat(rows=4, d=256):
    return torch.randn(rows, d), torch.rand(rows), torch.rand(d)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(grad=torch.zeros(256, dtype=torch.float16)), TypeError, "grad has dtype"),
    (dict(momentum_buffer=torch.zeros(256, dtype=torch.int32)), TypeError, "momentum_buffer has dtype"),
    (dict(grad=[0.0] * 256), TypeError, "grad must be a torch.Tensor"),
    (dict(beta1="0.9"), TypeError, "beta1"),
    (dict(beta1=True), TypeError, "beta1"),
    (dict(nesterov=1), TypeError, "nesterov must be a bool"),
    (dict(momentum_buffer=torch.zeros(512)), ValueError, "same number of elements"),
    (dict(grad=torch.zeros(100), momentum_buffer=torch.zeros(100)), ValueError, "multiple of 256"),
    (dict(grad=torch.zeros(2, 512)[:, ::2], momentum_buffer=torch.zeros(2, 256)), ValueError, "grad must be contiguous"),
    (dict(momentum_buffer=torch.zeros(512)[::2]), ValueError, "momentum_buffer must be contiguous"),
    (dict(), ValueError, "CUDA"),
])
def test_momentum_errors(kwargs, exc, match):
    args = dict(grad=torch.zeros(256), momentum_buffer=torch.zeros(256), beta1=0.9, nesterov=True)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        engram_sinkhorn_momentum_update(**args)


def test_momentum_empty_returns_empty_fp32_like_the_buffer():
    out = engram_sinkhorn_momentum_update(torch.zeros(0, dtype=torch.bfloat16), torch.zeros(0, 4), 0.9)
    assert out.dtype == F32 and out.shape == (0, 4)


def _step_args(**kw):
    m, r, c = _mat()
    args = dict(matrix=m, row_scale=r, col_scale=c, eps=1e-20)
    args.update(kw)
    return args


COMMON_MATRIX_ERRORS = [
    (dict(matrix=torch.zeros(4, 256, dtype=torch.bfloat16)), TypeError, "matrix has dtype"),
    (dict(row_scale=torch.zeros(4, dtype=torch.float64)), TypeError, "row_scale has dtype"),
    (dict(col_scale=torch.zeros(256, dtype=torch.float16)), TypeError, "col_scale has dtype"),
    (dict(matrix=torch.zeros(4, 256, 1)), ValueError, "matrix must be 2-D"),
    (dict(row_scale=torch.zeros(4, 1)), ValueError, "row_scale must be 1-D"),
    (dict(matrix=torch.zeros(4, 320), col_scale=torch.zeros(320)), ValueError, "multiple of 256"),
    (dict(matrix=torch.zeros(4, 0), col_scale=torch.zeros(0)), ValueError, "positive multiple of 256"),
    (dict(row_scale=torch.zeros(5)), ValueError, "row_scale must have shape"),
    (dict(col_scale=torch.zeros(512)), ValueError, "col_scale must have shape"),
    (dict(matrix=torch.zeros(256, 4).t()), ValueError, "matrix must be contiguous"),
    (dict(col_scale=torch.zeros(512)[::2]), ValueError, "col_scale must be contiguous"),
    (dict(eps="1e-20"), TypeError, "eps"),
    (dict(), ValueError, "CUDA"),
]


@pytest.mark.parametrize("kwargs,exc,match", COMMON_MATRIX_ERRORS)
def test_step_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        engram_sinkhorn_step(**_step_args(**kwargs))


@pytest.mark.parametrize("kwargs,exc,match", COMMON_MATRIX_ERRORS + [
    (dict(alpha=None), TypeError, "alpha"),
    (dict(out=torch.zeros(4, 256, dtype=torch.bfloat16)), TypeError, "out has dtype"),
    (dict(out=torch.zeros(4, 512)), ValueError, "out must have matrix's shape"),
    (dict(out=torch.zeros(256, 4).t()), ValueError, "out must be contiguous"),
])
def test_finalize_errors(kwargs, exc, match):
    args = _step_args(alpha=16.0)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        engram_sinkhorn_finalize(**args)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(col_sumsq_partial=torch.zeros(3, 256, dtype=torch.bfloat16)), TypeError, "col_sumsq_partial has dtype"),
    (dict(col_sumsq=torch.zeros(256, dtype=torch.float64)), TypeError, "col_sumsq has dtype"),
    (dict(col_sumsq_partial=torch.zeros(3, 256, 1)), ValueError, "col_sumsq_partial must be 2-D"),
    (dict(col_sumsq_partial=torch.zeros(3, 320), col_sumsq=torch.zeros(320)), ValueError, "multiple of 256"),
    (dict(col_sumsq=torch.zeros(512)), ValueError, "col_sumsq must have shape"),
    (dict(col_sumsq_partial=torch.zeros(256, 3).t()), ValueError, "col_sumsq_partial must be contiguous"),
    (dict(col_sumsq=torch.zeros(512)[::2]), ValueError, "col_sumsq must be contiguous"),
    (dict(), ValueError, "CUDA"),
])
def test_step_reduce_errors(kwargs, exc, match):
    args = dict(col_sumsq_partial=torch.zeros(3, 256), col_sumsq=torch.zeros(256))
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        engram_sinkhorn_step_reduce(**args)
