"""engram_hash, fused_weight and grad_w_reduce on the GPU: bit-identical to the references (integer hash, exact
product, the row-ordered reduction with one fma), on the peer's test shapes, with special values and empty inputs."""
import pytest
import torch

import kernelkiln
from bitwise import assert_bitwise
from kernelkiln_contract.engram import ENGRAM_HASH
from kernelkiln._ops.launch import has_variant
from kernelkiln.torch import engram_hash_ref, fused_weight_ref, grad_w_reduce_ref, make_offsets

pytestmark = pytest.mark.gpu
I32, I64 = torch.iinfo(torch.int32), torch.iinfo(torch.int64)
HIDDEN = [512, 768, 2048, 2560, 4096, 7168]


def _hash_inputs(t, n, layers, m):
    ids = torch.randint(I32.min, I32.max, (t, n), dtype=torch.int32, device="cuda")
    mult = torch.randint(I64.min, I64.max, (layers, n), dtype=torch.int64, device="cuda")
    vocab = torch.randint(1, 5 * 129280, (layers, n - 1, m), dtype=torch.int32, device="cuda")
    return ids, mult, vocab, make_offsets(vocab)


def _opcheck_hash():
    ids, mult, vocab, off = _hash_inputs(100, 3, 2, 8)
    return (ids, mult, vocab, off, torch.rand(100, device="cuda") < 0.5), {}


def _opcheck_fused():
    return (torch.randn(4, 512, device="cuda").bfloat16(), torch.randn(4, 512, device="cuda").bfloat16()), {}


def _opcheck_reduce():
    wh, we = _opcheck_fused()[0]
    return (torch.randn(20, 4, 512, device="cuda"), wh, we, torch.randn(4, 512, device="cuda"),
            torch.randn(4, 512, device="cuda")), {}


OPCHECK_CASES = {"engram_hash": _opcheck_hash, "fused_weight": _opcheck_fused, "grad_w_reduce": _opcheck_reduce}


@pytest.mark.parametrize("t", [0, 1, 31, 512, 8001, 16384])
@pytest.mark.parametrize("n, m", [(2, 8), (3, 8), (4, 8), (3, 4), (3, 16)])
@pytest.mark.parametrize("masked", [False, True])
def test_engram_hash_bitwise(seed, t, n, m, masked):
    if not has_variant(ENGRAM_HASH, ENGRAM_HASH.key(max_ngram_size=n, num_embed_table_per_ngram=m,
                                                    has_image_token_mask=masked), 0):
        pytest.skip(f"n={n}, M={m} is not in this build's manifest")
    ids, mult, vocab, off = _hash_inputs(t, n, 2, m)
    mask = torch.rand(t, device="cuda") < 0.25 if masked else None
    got = kernelkiln.engram.engram_hash(ids, mult, vocab, off, mask)
    assert_bitwise(got, engram_hash_ref(ids, mult, vocab, off, mask), "engram_hash")
    if masked and t:
        assert (got[:, mask] == -1).all()


def test_engram_hash_extreme_values(seed):
    """int32 extremes in the ids, int64 extremes in the multipliers (wrapping products), vocab sizes up to int32
    max and offsets that overflow int32 when added (truncated, as the peer's)."""
    t, n, m = 1000, 3, 8
    ids = torch.randint(I32.min, I32.max, (t, n), dtype=torch.int32, device="cuda")
    ids[::3] = I32.min
    ids[1::3] = I32.max
    mult = torch.randint(I64.min, I64.max, (2, n), dtype=torch.int64, device="cuda")
    mult[0, 0] = I64.min
    vocab = torch.randint(1, I32.max, (2, n - 1, m), dtype=torch.int32, device="cuda")
    off = torch.randint(I32.min, I32.max, (2, (n - 1) * m), dtype=torch.int32, device="cuda")
    assert_bitwise(kernelkiln.engram.engram_hash(ids, mult, vocab, off), engram_hash_ref(ids, mult, vocab, off),
                   "engram_hash (extremes)")


@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("hc", [1, 4])
def test_fused_weight_bitwise(seed, hc, h):
    wh, we = torch.randn(hc, h, device="cuda").bfloat16(), (torch.randn(hc, h, device="cuda") * 100).bfloat16()
    wh.view(-1)[:6] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3e38], device="cuda").bfloat16()
    assert_bitwise(kernelkiln.engram.fused_weight(wh, we), fused_weight_ref(wh, we), "fused_weight")


def test_fused_weight_empty():
    wh = torch.empty(0, 512, device="cuda", dtype=torch.bfloat16)
    assert kernelkiln.engram.fused_weight(wh, wh.clone()).shape == (0, 512)


@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("p", [0, 1, 15, 16, 17, 113, 132, 264])
def test_grad_w_reduce_bitwise(seed, p, h):
    hc = 4
    part = torch.randn(p, hc, h, device="cuda") * torch.rand(p, 1, 1, device="cuda").exp()
    wh, we = torch.randn(hc, h, device="cuda").bfloat16(), torch.randn(hc, h, device="cuda").bfloat16()
    gh, ge = torch.randn(hc, h, device="cuda"), torch.randn(hc, h, device="cuda")
    want_h, want_e = gh.clone(), ge.clone()
    grad_w_reduce_ref(part, wh, we, want_h, want_e)
    assert kernelkiln.engram.grad_w_reduce(part, wh, we, gh, ge) is None
    assert_bitwise(gh, want_h, "grad_weight_hidden")
    assert_bitwise(ge, want_e, "grad_weight_embed")


def test_grad_w_reduce_special_values(seed):
    hc, h, p = 4, 512, 20
    part = torch.randn(p, hc, h, device="cuda")
    part[3, 0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")], device="cuda")
    part[5, 1, 0] = 3e38
    part[6, 1, 0] = 3e38  # the sum overflows to inf
    wh, we = torch.randn(hc, h, device="cuda").bfloat16(), torch.randn(hc, h, device="cuda").bfloat16()
    we[2, :2] = 0.0
    gh, ge = torch.zeros(hc, h, device="cuda"), torch.zeros(hc, h, device="cuda")
    want_h, want_e = gh.clone(), ge.clone()
    grad_w_reduce_ref(part, wh, we, want_h, want_e)
    kernelkiln.engram.grad_w_reduce(part, wh, we, gh, ge)
    assert_bitwise(gh, want_h, "grad_weight_hidden")
    assert_bitwise(ge, want_e, "grad_weight_embed")
