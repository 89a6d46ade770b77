"""apply_rotary on the GPU: bit-identical to the fma-form reference (kernelkiln.torch.apply_rotary_ref) on the peer's
test shapes, within the peer's tolerance of its unfused reference, in place, and special values as IEEE makes them."""
import pytest
import torch

import kernelkiln
from bitwise import assert_bitwise
from kernelkiln.torch import apply_rotary_ref, rotary_embedding_ref

pytestmark = pytest.mark.gpu
DTYPES = [torch.bfloat16, torch.float32]


def _opcheck_case():
    """(args, kwargs) of kernelkiln::apply_rotary's schema for tests/runtime/test_opcheck_gpu.py."""
    t = 64
    q, k = torch.randn(t, 4, 64, device="cuda").to(torch.bfloat16), torch.randn(t, 2, 64, device="cuda").to(torch.bfloat16)
    pos = torch.randint(0, t + 8, (t,), device="cuda", dtype=torch.int32)
    return (q, _cache(t + 8, 64), k, pos, True, False, 3), {}


OPCHECK_CASES = {"apply_rotary": _opcheck_case}


def _cache(rows, d):
    ang = torch.rand(rows, d // 2, device="cuda") * 6.283
    return torch.cat((ang.cos(), ang.sin()), dim=1)


def _x(shape, dtype):
    return torch.randn(shape, device="cuda").to(dtype)


def _calc_diff(x, y):
    """The peer's difference measure: 1 - 2 <x, y> / (|x|^2 + |y|^2), in float64."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return (1 - 2 * (x * y).sum() / denom).item() if denom else 0.0


def _check(q, cache, key=None, positions=None, interleaved=False, conjugate=False, seqlen_offset=0):
    q0, k0 = q.clone(), (key.clone() if key is not None else None)
    want_q, want_k = apply_rotary_ref(q0, cache, k0, positions, interleaved, conjugate, seqlen_offset)
    assert kernelkiln.transform.apply_rotary(q, cache, key, positions, interleaved, conjugate, seqlen_offset) is None
    assert_bitwise(q, want_q, "query")
    if key is not None:
        assert_bitwise(key, want_k, "key")
    d = cache.shape[1]
    peer = rotary_embedding_ref(q0, cache[:, : d // 2], cache[:, d // 2:], positions, seqlen_offset, interleaved,
                                conjugate)
    assert _calc_diff(q, peer) <= 1e-8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads", [1, 5, 32, 128])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("conjugate", [False, True])
def test_3d_with_positions(seed, dtype, heads, d, interleaved, conjugate):
    s = 2001
    cache = _cache(8192, d)
    q, k = _x((s, heads, d), dtype), _x((s, max(1, heads // 4), d), dtype)
    pos = torch.randint(0, 8192 - 17, (s,), device="cuda", dtype=torch.int32)
    _check(q, cache, k, pos, interleaved, conjugate, 17)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [32, 256])
def test_other_head_dims(seed, dtype, d):
    cache = _cache(4096, d)
    _check(_x((777, 8, d), dtype), cache, _x((777, 2, d), dtype), None, d == 32, False, 100)


@pytest.mark.parametrize("b, heads, d, case", [(3, 1, 64, "offset"), (1, 32, 128, "int32"), (3, 64, 64, "broadcast"),
                                               (3, 128, 128, "int64-conj")])
def test_4d_cases(seed, b, heads, d, case):
    s, dtype = 2048, torch.bfloat16
    cache = _cache(8192, d)
    q, k = _x((b, s, heads, d), dtype), _x((b, s, 2, d), dtype)
    if case == "offset":
        _check(q, cache, k, None, False, False, 17)
    elif case == "int32":
        _check(q, cache, k, torch.randint(0, 8192, (b, s), device="cuda", dtype=torch.int32))
    elif case == "broadcast":  # one row of positions for every batch row (batch stride 0)
        pos = torch.randint(0, 8192, (1, s), device="cuda", dtype=torch.int32).expand(b, s)
        _check(q, cache, k, pos, True)
    else:
        _check(q, cache, k, torch.randint(0, 8192, (b, s), device="cuda", dtype=torch.int64), False, True)


def test_head_split_and_partial_rotary_leave_the_rest_untouched(seed):
    """q and k as views of one fused [S, 3 * heads, 96] projection: the head stride is not heads * D, and the last
    32 channels of every head and the v heads are bit-identical afterwards."""
    s, heads, d = 1000, 8, 64
    qkv = _x((s, 3 * heads, 96), torch.bfloat16)
    before = qkv.clone()
    q, k = qkv[:, :heads, :d], qkv[:, heads:2 * heads, :d]
    cache = _cache(2048, d)
    want_q, want_k = apply_rotary_ref(q.clone(), cache, k.clone())
    kernelkiln.transform.apply_rotary(q, cache, k)
    assert_bitwise(q.contiguous(), want_q, "query")
    assert_bitwise(k.contiguous(), want_k, "key")
    assert_bitwise(qkv[..., d:].contiguous(), before[..., d:].contiguous(), "channels past the rotary dim")
    assert_bitwise(qkv[:, 2 * heads:].contiguous(), before[:, 2 * heads:].contiguous(), "v heads")


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(seed, dtype):
    """inf and NaN spread within their pair only, as IEEE arithmetic spreads them; NaN payloads may differ between the
    kernel's casts and torch's, so NaNs are compared by position."""
    s, heads, d = 300, 4, 64
    q = _x((s, heads, d), dtype)
    q[0, 0, 0], q[1, 1, 5], q[2, 2, 40], q[3, 3, 63] = float("inf"), float("-inf"), float("nan"), 0.0
    q[4] = 0.0
    cache = _cache(512, d)
    want, _ = apply_rotary_ref(q.clone(), cache)
    kernelkiln.transform.apply_rotary(q, cache)
    assert torch.equal(torch.isnan(q), torch.isnan(want))
    finite = ~torch.isnan(want)
    assert torch.equal(q[finite].float(), want[finite].float())
    assert (q[4] == 0).all()


def test_empty_inputs(seed):
    cache = _cache(16, 64)
    q = _x((0, 4, 64), torch.bfloat16)
    kernelkiln.transform.apply_rotary(q, cache, _x((0, 2, 64), torch.bfloat16))
    kernelkiln.transform.apply_rotary(_x((5, 0, 64), torch.bfloat16), cache)


def test_under_torch_compile_fullgraph(seed):
    q, k, cache = _x((64, 4, 64), torch.bfloat16), _x((64, 2, 64), torch.bfloat16), _cache(128, 64)
    pos = torch.randint(0, 128, (64,), device="cuda", dtype=torch.int32)
    want_q, want_k = apply_rotary_ref(q.clone(), cache, k.clone(), pos, True)

    @torch.compile(fullgraph=True)
    def f(q, k):
        kernelkiln.transform.apply_rotary(q, cache, k, pos, True)
        return q * 1, k * 1

    got_q, got_k = f(q, k)
    assert_bitwise(got_q, want_q, "query")
    assert_bitwise(got_k, want_k, "key")
