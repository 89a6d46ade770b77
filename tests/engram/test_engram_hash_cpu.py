"""engram_hash, fused_weight and grad_w_reduce on the CPU: our references against the peer's (tile_kernels 2.1.0's,
loaded by path) bit for bit over random and extreme integers, and every argument error of the public functions."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernelkiln
from kernelkiln.torch import engram_hash_ref, fused_weight_ref, grad_w_reduce_ref, make_offsets
from kernelkiln.torch.fused import fma_f32

I32, I64 = torch.iinfo(torch.int32), torch.iinfo(torch.int64)


def _hash_inputs(g, t, n, layers, m, big_offsets=False, extreme=False):
    ids = torch.randint(I32.min, I32.max, (t, n), generator=g, dtype=torch.int32)
    if extreme and t:
        ids.view(-1)[:: 7] = I32.min
        ids.view(-1)[1:: 7] = I32.max
    mult = torch.randint(I64.min, I64.max, (layers, n), generator=g, dtype=torch.int64)
    if extreme:
        mult.view(-1)[0] = I64.min
    vocab = torch.randint(1, I32.max if extreme else 1000, (layers, n - 1, m), generator=g, dtype=torch.int32)
    offsets = make_offsets(vocab) if not big_offsets else torch.randint(I32.min, I32.max, (layers, (n - 1) * m),
                                                                        generator=g, dtype=torch.int32)
    return ids, mult, vocab, offsets


@settings(max_examples=60, deadline=None)
@given(t=st.integers(0, 70), n=st.sampled_from([2, 3, 4, 5]), layers=st.integers(1, 3),
       m=st.sampled_from([1, 2, 4, 8, 16]), masked=st.booleans(), big_offsets=st.booleans(), extreme=st.booleans(),
       seed=st.integers(0, 2**16))
def test_hash_reference_is_the_peers(peer_engram, t, n, layers, m, masked, big_offsets, extreme, seed):
    g = torch.Generator().manual_seed(seed)
    ids, mult, vocab, offsets = _hash_inputs(g, t, n, layers, m, big_offsets, extreme)
    mask = torch.rand(t, generator=g) < 0.3 if masked else None
    want = peer_engram.engram_hash_ref(ids, mult, vocab, offsets, mask)
    got = engram_hash_ref(ids, mult, vocab, offsets, mask)
    assert got.dtype == want.dtype == torch.int32 and got.shape == want.shape == (layers, t, (n - 1) * m)
    assert torch.equal(got, want)


def test_hash_floor_modulo_of_negative_hashes():
    """A negative 64-bit hash still maps into [0, vocab): Python's modulo, which the kernel's floormod is."""
    ids = torch.tensor([[1, 1]], dtype=torch.int32)
    mult = torch.tensor([[-7, 0]], dtype=torch.int64)
    vocab = torch.tensor([[[5]]], dtype=torch.int32)
    out = engram_hash_ref(ids, mult, vocab, make_offsets(vocab))
    assert out.item() == (-7) % 5 == 3


@settings(max_examples=30, deadline=None)
@given(layers=st.integers(1, 4), n=st.sampled_from([2, 3, 4]), m=st.sampled_from([1, 8]), seed=st.integers(0, 2**16))
def test_make_offsets_is_the_peers(peer_engram, layers, n, m, seed):
    g = torch.Generator().manual_seed(seed)
    vocab = torch.randint(1, 100000, (layers, n - 1, m), generator=g, dtype=torch.int32)
    assert torch.equal(make_offsets(vocab), peer_engram.make_offsets(vocab))


SPECIAL_BF16 = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3.0e38, 1e-38]


@settings(max_examples=40, deadline=None)
@given(hc=st.integers(1, 4), h=st.sampled_from([256, 512]), special=st.sampled_from(SPECIAL_BF16),
       seed=st.integers(0, 2**16))
def test_fused_weight_reference_is_exact(hc, h, special, seed):
    """The product of two bf16 values is exact in fp32: equal to the float64 product rounded once."""
    g = torch.Generator().manual_seed(seed)
    wh, we = (torch.randn(hc, h, generator=g) * 8).to(torch.bfloat16), torch.randn(hc, h, generator=g).to(torch.bfloat16)
    wh.view(-1)[seed % wh.numel()] = special
    got = fused_weight_ref(wh, we)
    exact = (wh.double() * we.double()).float()
    assert torch.equal(got.view(torch.int32)[~got.isnan()], exact.view(torch.int32)[~exact.isnan()])
    assert torch.equal(got.isnan(), exact.isnan())


@settings(max_examples=30, deadline=None)
@given(p=st.integers(0, 40), hc=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_grad_w_reduce_reference_order(p, hc, seed):
    """Rows added in turn (not torch.sum's tree) and one fma per gradient: checked against a float64 emulation of
    that order, and within the peer's tolerance of its test's sum-then-multiply form."""
    g = torch.Generator().manual_seed(seed)
    h = 256
    part = torch.randn(p, hc, h, generator=g) * torch.rand(p, 1, 1, generator=g).exp()
    wh, we = torch.randn(hc, h, generator=g).to(torch.bfloat16), torch.randn(hc, h, generator=g).to(torch.bfloat16)
    gh0, ge0 = torch.randn(hc, h, generator=g), torch.randn(hc, h, generator=g)
    gh, ge = gh0.clone(), ge0.clone()
    assert grad_w_reduce_ref(part, wh, we, gh, ge) is None
    s = torch.zeros(hc, h)
    for i in range(p):
        s = (s.double() + part[i].double()).float()  # one fp32 rounding per row
    assert torch.equal(gh, fma_f32(s, we.float(), gh0)) and torch.equal(ge, fma_f32(s, wh.float(), ge0))
    loose = gh0 + part.sum(0) * we.float()
    assert torch.allclose(gh, loose, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------------- errors
def _ok_hash():
    g = torch.Generator().manual_seed(0)
    return _hash_inputs(g, 10, 3, 2, 8)


@pytest.mark.parametrize("which, bad, exc, match", [
    (0, lambda a: a.long(), TypeError, "ngram_token_ids has dtype"),
    (0, lambda a: a[:, :1].contiguous(), ValueError, "max_ngram_size"),
    (0, lambda a: a.t().contiguous().t(), ValueError, "ngram_token_ids must be contiguous"),
    (1, lambda a: a.int(), TypeError, "multipliers has dtype"),
    (1, lambda a: a[:, :2].contiguous(), ValueError, "multipliers must have shape"),
    (2, lambda a: a[:, :1].contiguous(), ValueError, "vocab_sizes must have shape"),
    (2, lambda a: a[:, :, :3].contiguous(), ValueError, "num_embed_table_per_ngram"),
    (3, lambda a: a[:, :4].contiguous(), ValueError, "offsets must have shape"),
    (3, lambda a: a.float(), TypeError, "offsets has dtype"),
])
def test_hash_argument_errors(which, bad, exc, match):
    args = list(_ok_hash())
    args[which] = bad(args[which])
    with pytest.raises(exc, match=match):
        kernelkiln.engram.engram_hash(*args)


def test_hash_mask_errors_and_cpu():
    args = _ok_hash()
    with pytest.raises(TypeError, match="image_token_mask has dtype"):
        kernelkiln.engram.engram_hash(*args, image_token_mask=torch.zeros(10, dtype=torch.int32))
    with pytest.raises(ValueError, match="image_token_mask must have shape"):
        kernelkiln.engram.engram_hash(*args, image_token_mask=torch.zeros(11, dtype=torch.bool))
    with pytest.raises(ValueError, match="need a CUDA tensor"):
        kernelkiln.engram.engram_hash(*args, image_token_mask=torch.zeros(10, dtype=torch.bool))


def _weights(hc=4, h=512):
    return torch.randn(hc, h).to(torch.bfloat16), torch.randn(hc, h).to(torch.bfloat16)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda wh, we: (wh.float(), we), TypeError, "weight_hidden has dtype"),
    (lambda wh, we: (wh, we[:, :256].contiguous()), ValueError, "weight_embed must have weight_hidden's shape"),
    (lambda wh, we: (wh[:, :300].contiguous(), we[:, :300].contiguous()), ValueError, "multiple of 256"),
    (lambda wh, we: (wh.t(), we.t()), ValueError, "must be contiguous"),
    (lambda wh, we: (wh[0], we[0]), ValueError, "must be 2-D"),
    (lambda wh, we: (wh, we), ValueError, "need a CUDA tensor"),
])
def test_fused_weight_argument_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        kernelkiln.engram.fused_weight(*bad(*_weights()))


@pytest.mark.parametrize("bad, exc, match", [
    (lambda a: {**a, "grad_w_partial": a["grad_w_partial"].double()}, TypeError, "grad_w_partial has dtype"),
    (lambda a: {**a, "grad_w_partial": a["grad_w_partial"][:, :2]}, ValueError, r"= \[P, 4, 512\]"),
    (lambda a: {**a, "grad_weight_hidden": a["grad_weight_hidden"].bfloat16()}, TypeError, "grad_weight_hidden has dtype"),
    (lambda a: {**a, "grad_weight_embed": a["grad_weight_embed"][:2]}, ValueError, "grad_weight_embed must have"),
    (lambda a: {**a, "grad_weight_embed": a["grad_weight_hidden"]}, ValueError, "must be different tensors"),
    (lambda a: a, ValueError, "need a CUDA tensor"),
])
def test_grad_w_reduce_argument_errors(bad, exc, match):
    wh, we = _weights()
    a = dict(grad_w_partial=torch.randn(3, 4, 512), weight_hidden=wh, weight_embed=we,
             grad_weight_hidden=torch.zeros(4, 512), grad_weight_embed=torch.zeros(4, 512))
    with pytest.raises(exc, match=match):
        kernelkiln.engram.grad_w_reduce(**bad(a))


def test_the_peers_engram_reference_module_path(peer_engram):
    """``tile_kernels.torch.engram`` holds every Engram reference; ours under the same path, same signatures."""
    import inspect

    from kernelkiln.torch import engram as ours
    public = [n for n, v in vars(peer_engram).items() if inspect.isfunction(v) and not n.startswith("_")
              and v.__module__ == peer_engram.__name__]
    assert public, "no functions found in the peer's module"
    for name in public:
        assert name in ours.__all__, name
        assert inspect.signature(getattr(ours, name)).parameters.keys() == \
            inspect.signature(getattr(peer_engram, name)).parameters.keys(), name
