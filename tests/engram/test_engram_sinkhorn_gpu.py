"""Engram Sinkhorn ops on the GPU, on the peer's test shapes: bit-identical to the ordered references of this arch
(kernelkiln.torch.engram_sinkhorn_*_ordered), within the peer's tolerance of its own references, in place where the
peer is, deterministic, special values as IEEE makes them, and empty inputs."""
import pytest
import torch

import kernelkiln
from bitwise import assert_bitwise
from kernelkiln import config
from kernelkiln.torch import (engram_sinkhorn_finalize_ordered, engram_sinkhorn_finalize_ref,
                              engram_sinkhorn_momentum_update_ref, engram_sinkhorn_step_ordered,
                              engram_sinkhorn_step_reduce_ordered, engram_sinkhorn_step_ref)

pytestmark = pytest.mark.gpu
E = kernelkiln.engram
DTYPES = [torch.bfloat16, torch.float32]
EPS = 1e-20


def _arch():
    return "sm_100" if torch.cuda.get_device_capability()[0] >= 10 else "sm_90"


def _parts():
    return 3 * config.get_num_sms()


def _opcheck_momentum():
    grad = torch.randn(4 * 256, device="cuda").to(torch.bfloat16)
    return (grad, torch.randn(4 * 256, device="cuda"), 0.95, True), {}


def _opcheck_step():
    return (torch.randn(40, 512, device="cuda"), torch.rand(40, device="cuda"), torch.rand(512, device="cuda"),
            EPS), {}


def _opcheck_step_reduce():
    return (torch.rand(_parts(), 512, device="cuda"), torch.empty(512, device="cuda")), {}


def _opcheck_finalize():
    return (torch.randn(40, 768, device="cuda"), torch.rand(40, device="cuda"), torch.rand(768, device="cuda"),
            EPS, 768 ** 0.5), {}


def _opcheck_finalize_out():
    args, _ = _opcheck_finalize()
    return (*args, torch.empty(40, 768, device="cuda")), {}


OPCHECK_CASES = {
    "engram_sinkhorn_momentum_update": _opcheck_momentum,
    "engram_sinkhorn_step": _opcheck_step,
    "engram_sinkhorn_step_reduce": _opcheck_step_reduce,
    "engram_sinkhorn_finalize": _opcheck_finalize,
    "engram_sinkhorn_finalize_out": _opcheck_finalize_out,
}


def _assert_bitwise_nan(actual, expected, what):
    """Bitwise where the expected value is a number; NaN where it is NaN (the float64 emulation of an fma makes
    other NaN payloads than the GPU's FFMA, and neither is specified)."""
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan), f"{what}: NaN positions differ"
    assert_bitwise(torch.where(nan, 0.0, actual.float()), torch.where(nan, 0.0, expected.float()), what)


def _poisoned(shape, dtype=torch.float32):
    t = torch.empty(shape, dtype=dtype, device="cuda")
    t.view(torch.uint8).fill_(0xFF)  # NaN in every float format
    return t


# ---------------------------------------------------------------------------------------------------- momentum

MOMENTUM_NUMELS = [1001 * 256, 10001 * 256, 100001 * 512, 1000001 * 512]


@pytest.mark.parametrize("numel", MOMENTUM_NUMELS)
@pytest.mark.parametrize("grad_dtype", DTYPES)
@pytest.mark.parametrize("momentum_dtype", DTYPES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_bitwise(seed, numel, grad_dtype, momentum_dtype, nesterov):
    grad = torch.randn(numel, device="cuda").to(grad_dtype)
    mom = torch.randn(numel, device="cuda").to(momentum_dtype)
    mom_ref = mom.clone()
    want = engram_sinkhorn_momentum_update_ref(grad, mom_ref, 0.95, nesterov)
    out = E.engram_sinkhorn_momentum_update(grad, mom, 0.95, nesterov)
    assert_bitwise(out, want, "sinkhorn_input")
    assert_bitwise(mom, mom_ref, "momentum_buffer")


@pytest.mark.parametrize("beta1", [0.0, 1.0, 0.9, 0.123456789, 0.999])
@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_special_values_and_betas(seed, beta1, nesterov):
    specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3e38, -3e38, 1e-40, -1e-45],
                            device="cuda")
    grad = torch.randn(4 * 256, device="cuda")
    mom = torch.randn(4 * 256, device="cuda").to(torch.bfloat16)
    grad[: specials.numel()] = specials
    mom[300: 300 + specials.numel()] = specials.to(torch.bfloat16)
    mom_ref = mom.clone()
    want = engram_sinkhorn_momentum_update_ref(grad, mom_ref, beta1, nesterov)
    out = E.engram_sinkhorn_momentum_update(grad, mom, beta1, nesterov)
    _assert_bitwise_nan(out, want, "sinkhorn_input")
    _assert_bitwise_nan(mom, mom_ref, "momentum_buffer")


def test_momentum_keeps_shape_and_empty():
    grad = torch.randn(3, 4, 256, device="cuda")
    mom = torch.randn(3, 4, 256, device="cuda")
    assert E.engram_sinkhorn_momentum_update(grad, mom, 0.9).shape == (3, 4, 256)
    out = E.engram_sinkhorn_momentum_update(torch.empty(0, device="cuda"), torch.empty(0, 8, device="cuda"), 0.9)
    assert out.shape == (0, 8) and out.dtype == torch.float32


# ---------------------------------------------------------------------------------------------------- step

ROWS = [1001, 10001, 100001]
HEAD_DIMS = [256, 5120]


def _inputs(rows, d):
    return torch.randn(rows, d, device="cuda"), torch.rand(rows, device="cuda"), torch.rand(d, device="cuda")


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_step_bitwise_and_within_the_peers_tolerance(seed, rows, d):
    matrix, row_scale, col_scale = _inputs(rows, d)
    rs_ord, rs_peer = row_scale.clone(), row_scale.clone()
    norm_want, part_want = engram_sinkhorn_step_ordered(matrix, rs_ord, col_scale, EPS, _parts(), _arch())
    norm, part = E.engram_sinkhorn_step(matrix, row_scale, col_scale, EPS)
    assert part.shape == (_parts(), d)
    assert_bitwise(norm, norm_want, "row_norm")
    assert_bitwise(row_scale, rs_ord, "row_scale")
    assert_bitwise(part, part_want, "col_sumsq_partial")
    other = "sm_100" if _arch() == "sm_90" else "sm_90"  # the per-arch order shows: the other arch's bits differ
    assert not torch.equal(norm, engram_sinkhorn_step_ordered(matrix, rs_peer.clone(), col_scale, EPS, _parts(),
                                                              other)[0])
    col_sumsq = _poisoned(d)
    E.engram_sinkhorn_step_reduce(part, col_sumsq)
    col_peer = torch.empty(d, device="cuda")
    norm_peer = engram_sinkhorn_step_ref(matrix, rs_peer, col_scale, col_peer, EPS)
    torch.testing.assert_close(norm, norm_peer)
    torch.testing.assert_close(row_scale, rs_peer)
    torch.testing.assert_close(col_sumsq, col_peer)


@pytest.mark.parametrize("d", [512, 768, 1536, 2816, 6144, 8192, 12288])
def test_step_other_head_dims_and_the_register_fallback(seed, d):
    # 2816 = 11 * 256 (32 threads, 11 chunks) and 6144+ (beyond the register chunks) take the global-memory path
    rows = 777
    matrix, row_scale, col_scale = _inputs(rows, d)
    rs_ord = row_scale.clone()
    norm_want, part_want = engram_sinkhorn_step_ordered(matrix, rs_ord, col_scale, EPS, _parts(), _arch())
    norm, part = E.engram_sinkhorn_step(matrix, row_scale, col_scale, EPS)
    assert_bitwise(norm, norm_want, "row_norm")
    assert_bitwise(row_scale, rs_ord, "row_scale")
    assert_bitwise(part, part_want, "col_sumsq_partial")
    fin = E.engram_sinkhorn_finalize(matrix, row_scale, col_scale, EPS, d ** 0.5)
    assert_bitwise(fin, engram_sinkhorn_finalize_ordered(matrix, row_scale, col_scale, EPS, d ** 0.5, _arch()),
                   "finalize")


def test_step_few_rows_and_zero_rows(seed):
    for rows in (0, 1, 5):
        matrix, row_scale, col_scale = _inputs(rows, 1024)
        rs_ord = row_scale.clone()
        norm_want, part_want = engram_sinkhorn_step_ordered(matrix, rs_ord, col_scale, EPS, _parts(), _arch())
        norm, part = E.engram_sinkhorn_step(matrix, row_scale, col_scale, EPS)
        assert_bitwise(norm, norm_want, "row_norm")
        assert_bitwise(part, part_want, "col_sumsq_partial")  # CTAs without rows write zeros
        assert torch.equal(part[rows:], torch.zeros_like(part[rows:]))


def test_step_special_values(seed):
    matrix, row_scale, col_scale = _inputs(300, 512)
    matrix[3, 7], matrix[10, :] = float("inf"), 0.0  # an inf row norm; a zero row (norm 0, inv = 1 / eps)
    matrix[20, 5], row_scale[30] = float("nan"), -0.0
    rs_ord = row_scale.clone()
    norm_want, part_want = engram_sinkhorn_step_ordered(matrix, rs_ord, col_scale, EPS, _parts(), _arch())
    norm, part = E.engram_sinkhorn_step(matrix, row_scale, col_scale, EPS)
    _assert_bitwise_nan(norm, norm_want, "row_norm")
    _assert_bitwise_nan(row_scale, rs_ord, "row_scale")
    _assert_bitwise_nan(part, part_want, "col_sumsq_partial")


def test_step_is_deterministic(seed):
    matrix, row_scale, col_scale = _inputs(10001, 5120)
    rs2 = row_scale.clone()
    a = E.engram_sinkhorn_step(matrix, row_scale, col_scale, EPS)
    b = E.engram_sinkhorn_step(matrix, rs2, col_scale, EPS)
    assert_bitwise(a[0], b[0], "row_norm")
    assert_bitwise(a[1], b[1], "col_sumsq_partial")


# ---------------------------------------------------------------------------------------------------- step_reduce


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("sms_delta", [0, -19, 1])
def test_step_reduce(seed, d, sms_delta):
    parts = 3 * (config.get_num_sms() + sms_delta)
    partial = torch.rand(parts, d, device="cuda") * 10
    col_sumsq = _poisoned(d)
    assert E.engram_sinkhorn_step_reduce(partial, col_sumsq) is None
    assert_bitwise(col_sumsq, engram_sinkhorn_step_reduce_ordered(partial), "col_sumsq")
    torch.testing.assert_close(col_sumsq, partial.sum(0), rtol=3e-6, atol=1e-5)


@pytest.mark.parametrize("parts", [0, 1, 127, 128, 129, 511, 512, 513, 1000])
def test_step_reduce_partial_counts(seed, parts):
    partial = torch.rand(parts, 256, device="cuda")
    partial[: min(parts, 3), 9] = float("inf")
    col_sumsq = _poisoned(256)
    E.engram_sinkhorn_step_reduce(partial, col_sumsq)
    _assert_bitwise_nan(col_sumsq, engram_sinkhorn_step_reduce_ordered(partial), "col_sumsq")


# ---------------------------------------------------------------------------------------------------- finalize


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_finalize_bitwise_and_within_the_peers_tolerance(seed, rows, d):
    matrix, row_scale, col_scale = _inputs(rows, d)
    rs0 = row_scale.clone()
    alpha = d ** 0.5
    out = _poisoned((rows, d))
    assert E.engram_sinkhorn_finalize(matrix, row_scale, col_scale, EPS, alpha, out=out) is out
    assert_bitwise(out, engram_sinkhorn_finalize_ordered(matrix, row_scale, col_scale, EPS, alpha, _arch()), "out")
    assert_bitwise(row_scale, rs0, "row_scale (not modified)")
    torch.testing.assert_close(out, engram_sinkhorn_finalize_ref(matrix, row_scale, col_scale, EPS, alpha))
    fresh = E.engram_sinkhorn_finalize(matrix, row_scale, col_scale, EPS, alpha)
    assert_bitwise(fresh, out, "out=None")


def test_finalize_special_values_and_empty(seed):
    matrix, row_scale, col_scale = _inputs(50, 256)
    matrix[1, 2], matrix[4, :], matrix[7, 9] = float("inf"), 0.0, float("nan")
    out = E.engram_sinkhorn_finalize(matrix, row_scale, col_scale, EPS, 16.0)
    _assert_bitwise_nan(out, engram_sinkhorn_finalize_ordered(matrix, row_scale, col_scale, EPS, 16.0, _arch()), "out")
    empty = E.engram_sinkhorn_finalize(*_inputs(0, 256), EPS, 16.0)
    assert empty.shape == (0, 256)


def test_sinkhorn_iteration_chain(seed):
    # momentum -> (step -> reduce -> caller's column update) x 3 -> finalize, bitwise against the ordered chain
    rows, d = 10001, 256
    grad = torch.randn(rows * d, device="cuda").to(torch.bfloat16)
    mom = torch.zeros(rows * d, device="cuda")
    mom_ref = mom.clone()
    x = E.engram_sinkhorn_momentum_update(grad, mom, 0.95).view(rows, d)
    x_ref = engram_sinkhorn_momentum_update_ref(grad, mom_ref, 0.95).view(rows, d)
    rs, cs = torch.ones(rows, device="cuda"), torch.ones(d, device="cuda")
    rs_ref, cs_ref = rs.clone(), cs.clone()
    col = torch.empty(d, device="cuda")
    for _ in range(3):
        _, part = E.engram_sinkhorn_step(x, rs, cs, EPS)
        E.engram_sinkhorn_step_reduce(part, col)
        cs = cs / (col.sqrt() + EPS)
        _, part_ref = engram_sinkhorn_step_ordered(x_ref, rs_ref, cs_ref, EPS, _parts(), _arch())
        cs_ref = cs_ref / (engram_sinkhorn_step_reduce_ordered(part_ref).sqrt() + EPS)
    assert_bitwise(E.engram_sinkhorn_finalize(x, rs, cs, EPS, d ** 0.5),
                   engram_sinkhorn_finalize_ordered(x_ref, rs_ref, cs_ref, EPS, d ** 0.5, _arch()), "chain")
