"""The v1 pre-norm projection ops on the GPU, on the peer's norm_fn shapes (n1 {4096, 8192} x h {1280, 2560, 7168},
m 4, so K = 4h and m3 = 24) plus token tails and other m3: the sum of squares bit-identical to its ordered
reference, the TF32 GEMMs within a derived bound of their float64 references, special values confined to their
token, n = 0, and both ops bit-identical run to run. Outputs are poisoned (NaN) before each call.

Tolerance (kernelkiln_contract.mhc_norm_fn): the products of the TF32 operands are exact in fp32 and only the
tensor cores' fp32 additions round, one chain step per m16n8k8 MMA (8 products added to the accumulator). Allowing
each step an error of 2 ulps of the running magnitude (truncating adds: 2^-23 each, and the alignment of the 8
products) bounds the error of a sum of L terms by ``2^-22 · (L/8 + 1) · Σ|term|`` (L = K for out_mul and x_grad, n
for fn_grad); x_grad then adds the fma and its bf16 rounding, ``2^-8 · |value|``. A statistical check (the peer's
calc_diff) adds what the worst-case bound cannot see, at 1e-7."""
import pytest
import torch

from bitwise import assert_bitwise
from kernelkiln._formats import round_to_tf32
from kernelkiln.mhc import mhc_pre_norm_fn_bwd_mul, mhc_pre_norm_fn_fwd_mul
from kernelkiln.torch.mhc_norm_fn import mhc_pre_norm_fn_bwd_mul_ref, mhc_pre_norm_fn_fwd_mul_ref
from kernelkiln_contract.mhc_norm_fn import PAD_ROWS

pytestmark = pytest.mark.gpu
NAN = float("nan")
M = 4
SHAPES = [(n, h) for n in (4096, 8192) for h in (1280, 2560, 7168)]  # the peer's norm_fn test grid
TAILS = [(1, 64), (31, 64), (33, 128), (129, 320), (1000, 1280)]  # token tails and short K (K = 4h)


def _calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return ((x - y) ** 2).sum().item() / den.item() if den else 0.0


def _bound(length, magnitude):
    return 2.0**-22 * (length / 8 + 1) * magnitude


def _inputs(n, k, m3):
    # the peer's data: residual randn, fn randn·1e-4 (rounded by the caller, as v1's layer does)
    x = torch.randn(n, k, device="cuda").bfloat16()
    fn = round_to_tf32(torch.randn(m3, k, device="cuda") * 1e-4)
    return x, fn


def _fwd(x, fn):
    n, m3 = x.shape[0], fn.shape[0]
    out_mul = torch.full((n, 1, m3), NAN, device="cuda")
    sqrsum = torch.full((n, 1), NAN, device="cuda")
    mhc_pre_norm_fn_fwd_mul(x, fn, out_mul, sqrsum)
    return out_mul, sqrsum


def _check_fwd(x, fn, out_mul, sqrsum):
    ref, sq_ref = mhc_pre_norm_fn_fwd_mul_ref(x, fn)
    mag, _ = mhc_pre_norm_fn_fwd_mul_ref(x, fn, magnitudes=True)
    assert_bitwise(sqrsum, sq_ref, "sqrsum")
    err = (out_mul.double() - ref).abs()
    assert err.le(_bound(x.shape[1], mag)).all(), f"out_mul: max error {err.max().item()}"
    assert _calc_diff(out_mul, ref) < 1e-7


@pytest.mark.parametrize("n, h", SHAPES + TAILS)
def test_fwd(seed, n, h):
    x, fn = _inputs(n, M * h, M * (M + 2))
    _check_fwd(x, fn, *_fwd(x, fn))


@pytest.mark.parametrize("m3", [1, 5, 8, 32])
def test_fwd_other_m3(seed, m3):
    x, fn = _inputs(300, 1024, m3)
    _check_fwd(x, fn, *_fwd(x, fn))


def test_fwd_special_values_stay_in_their_token(seed):
    x, fn = _inputs(100, 1024, 24)
    x[7, 300], x[40, 5], x[99, 1023] = NAN, float("inf"), float("-inf")
    out_mul, sqrsum = _fwd(x, fn)
    assert sqrsum[7].isnan().all() and sqrsum[40].isinf().all() and sqrsum[99].isinf().all()
    assert out_mul[7].isnan().all() and not out_mul[40].isfinite().any() and not out_mul[99].isfinite().any()
    keep = torch.ones(100, dtype=torch.bool, device="cuda")
    keep[[7, 40, 99]] = False
    _check_fwd(x[keep], fn, out_mul[keep], sqrsum[keep])


def test_fwd_empty(seed):
    x, fn = _inputs(0, 1024, 24)
    _fwd(x, fn)  # no launch, no error
    out_mul, sqrsum = _fwd(torch.zeros(5, 0, dtype=torch.bfloat16, device="cuda"), torch.zeros(24, 0, device="cuda"))
    assert out_mul.eq(0).all() and sqrsum.eq(0).all()


def test_fwd_deterministic(seed):
    x, fn = _inputs(4096, 4 * 2560, 24)
    a, b = _fwd(x, fn), _fwd(x, fn)
    assert_bitwise(a[0], b[0], "out_mul")
    assert_bitwise(a[1], b[1], "sqrsum")


def _bwd_inputs(n, k, m3):
    x, fn = _inputs(n, k, m3)
    g = round_to_tf32(torch.randn(n, 1, m3, device="cuda"))
    # the three terms of x_grad of one size (~1e-3, 5e-4, 2e-4), so that losing any one of them fails the bound
    sg = torch.randn(n, 1, device="cuda") * 1e-4
    x_grad = (torch.randn(n, k, device="cuda") * 1e-3).bfloat16()
    return g, sg, x, fn, x_grad


def _bwd(g, sg, x, fn, x_grad):
    xg = x_grad.clone()
    fn_grad = torch.full(fn.shape, NAN, device="cuda")
    mhc_pre_norm_fn_bwd_mul(g, sg, x, fn, xg, fn_grad)
    return xg, fn_grad


def _check_bwd(g, sg, x, fn, x_grad, xg, fn_grad):
    n, k = x.shape
    ref_x, ref_fn = mhc_pre_norm_fn_bwd_mul_ref(g, sg, x, fn, x_grad)
    mag_x, mag_fn = mhc_pre_norm_fn_bwd_mul_ref(g, sg, x, fn, x_grad, magnitudes=True)
    err_x = (xg.double() - ref_x).abs()
    allowed_x = _bound(PAD_ROWS, mag_x) * (1 + 2.0**-8) + 2.0**-8 * ref_x.abs()  # K of that GEMM: the padded rows
    assert err_x.le(allowed_x).all(), f"x_grad: max error {err_x.max().item()}"
    err_fn = (fn_grad.double() - ref_fn).abs()
    assert err_fn.le(_bound(n, mag_fn)).all(), f"fn_grad: max error {err_fn.max().item()}"
    assert _calc_diff(fn_grad, ref_fn) < 1e-7
    assert _calc_diff(xg, ref_x) < 1e-4  # bf16 outputs: their rounding alone is ~2^-18 here


@pytest.mark.parametrize("n, h", SHAPES + TAILS)
def test_bwd(seed, n, h):
    args = _bwd_inputs(n, M * h, M * (M + 2))
    _check_bwd(*args, *_bwd(*args))


@pytest.mark.parametrize("m3", [1, 7, 32])
def test_bwd_other_m3(seed, m3):
    args = _bwd_inputs(300, 512, m3)
    _check_bwd(*args, *_bwd(*args))


def test_bwd_accumulates_into_x_grad(seed):
    g, sg, x, fn, _ = _bwd_inputs(200, 1024, 24)
    once, _ = _bwd(g, sg, x, fn, torch.zeros_like(x))
    twice, fn_grad = _bwd(g, sg, x, fn, once)
    _check_bwd(g, sg, x, fn, once, twice, fn_grad)
    assert not torch.equal(twice, once)


def test_bwd_no_tokens_zeroes_fn_grad(seed):
    args = _bwd_inputs(0, 1024, 24)
    xg, fn_grad = _bwd(*args)
    assert fn_grad.eq(0).all() and xg.numel() == 0


def test_bwd_deterministic(seed):
    args = _bwd_inputs(8192, 4 * 1280, 24)
    a, b = _bwd(*args), _bwd(*args)
    assert_bitwise(a[0], b[0], "x_grad")
    assert_bitwise(a[1], b[1], "fn_grad")


def test_bwd_ignores_memory_past_the_tensors(seed):
    # the last token block's rows past n and the weight's rows past m3 read as zeros: NaNs just past the views
    # (contiguous leading slices of larger tensors) must not reach either output
    n, k, m3 = 130, 256, 24
    g, sg, x, fn, x_grad = _bwd_inputs(n, k, m3)
    big_x = torch.full((256, k), NAN, device="cuda").bfloat16()
    big_g = torch.full((256, 1, m3), NAN, device="cuda")
    big_fn = torch.full((PAD_ROWS, k), NAN, device="cuda")
    big_x[:n], big_g[:n], big_fn[:m3] = x, g, fn
    xg, fn_grad = _bwd(big_g[:n], sg, big_x[:n], big_fn[:m3], x_grad)
    assert fn_grad.isfinite().all() and xg.isfinite().all()
    _check_bwd(g, sg, x, fn, x_grad, xg, fn_grad)


def test_fwd_ignores_weight_rows_past_m3(seed):
    x, fn = _inputs(100, 1024, 24)
    big_fn = torch.full((PAD_ROWS, 1024), NAN, device="cuda")
    big_fn[:24] = fn
    _check_fwd(x, fn, *_fwd(x, big_fn[:24]))


# ------------------------------------------------------------------------------------------------ opcheck cases
def _opcheck_fwd():
    x, fn = _inputs(100, 1024, 24)
    return (x, fn, torch.empty(100, 1, 24, device="cuda"), torch.empty(100, 1, device="cuda")), {}


def _opcheck_bwd():
    g, sg, x, fn, x_grad = _bwd_inputs(100, 512, 24)
    return (g, sg, x, fn, x_grad, torch.empty_like(fn)), {}


OPCHECK_CASES = {"mhc_pre_norm_fn_fwd_mul": _opcheck_fwd, "mhc_pre_norm_fn_bwd_mul": _opcheck_bwd}

