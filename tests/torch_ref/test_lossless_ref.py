"""CPU tests of the exact scale-conversion references (kernelkiln.torch.quant_lossless)."""
import pytest
import torch

from kernelkiln.torch import LosslessScaleError, batched_transpose_weight_sf, cast, cast_back, per_block_cast_lossless_ref

OUT_BLOCKS = [(1, 32), (1, 128), (32, 32), (32, 128), (128, 128)]
LAYOUTS = [(False, True, False), (True, True, True), (False, False, False)]  # (col-major, round_sf, packed)


def _mxfp4(t, h, spread=4, packed=False, seed=0):
    """MXFP4 (1, 32) input whose scale exponents vary by at most ``spread`` binades per row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g) * torch.exp2(torch.randint(-spread // 2, spread // 2 + 1, (t, h // 32),
                                                                  generator=g).float().repeat_interleave(32, 1))
    return cast(x, "e2m1", (1, 32), round_sf=True, use_packed_ue8m0=packed)


@pytest.mark.parametrize("ob", OUT_BLOCKS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("in_packed", [False, True])
@pytest.mark.parametrize("t", [1, 130, 256])
def test_lossless_round_trip_is_exact(ob, layout, in_packed, t):
    col, rnd, packed = layout
    x = _mxfp4(t, 512, packed=in_packed)
    q, sf = per_block_cast_lossless_ref(x, "e4m3", (1, 32), ob, col, rnd, packed)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (t, 512)
    assert sf.dtype == (torch.int32 if packed else torch.float32)
    if col:
        assert sf.stride(0) == 1
    fresh = sf.new_empty(sf.shape).copy_(sf)  # quant.cast_back cannot read a (1, 1) sf with odd strides
    assert torch.equal(cast_back((q, fresh), "fp32", ob), cast_back(x, "fp32", (1, 32)))


def test_out_exponent_rule_and_headroom():
    # one (1, 32) block at 2^0 and one at 2^-11: out exponent = 127 - 6, shifts 6 and -5 (the limit)
    data = torch.full((1, 64), 0x77, dtype=torch.uint8).view(torch.int8)  # every nibble = 6.0 (code 7)
    sf = torch.tensor([[1.0, 2.0**-11, 1.0, 1.0]])
    q, so = per_block_cast_lossless_ref((data, sf), "e4m3", (1, 32), (1, 128))
    assert so.item() == 2.0**-6
    assert q[0, 0].float().item() == 384.0 and q[0, 32].float().item() == 6 * 2.0**-5
    sf[0, 1] = 2.0**-12  # spread 12: not exact
    with pytest.raises(LosslessScaleError, match="more than 11|below the maximum"):
        per_block_cast_lossless_ref((data, sf), "e4m3", (1, 32), (1, 128))


def test_floor_at_zero_and_signed_zero():
    data = torch.tensor([[0x08] * 16], dtype=torch.uint8).view(torch.int8)  # -0.0, +0.0 pairs
    sf = torch.tensor([[2.0**-125]])  # biased exponent 2: out exponent floors at 0 (scale reads 0.0)
    q, so = per_block_cast_lossless_ref((data, sf), "e4m3", (1, 32), (1, 32))
    assert so.item() == 0.0
    assert q.view(torch.uint8)[0, :2].tolist() == [0x80, 0x00]


def test_lossless_rejects():
    x = _mxfp4(4, 128)
    with pytest.raises(ValueError, match="multiple"):
        per_block_cast_lossless_ref(x, "e4m3", (1, 32), (1, 16))
    with pytest.raises(ValueError, match="round_sf"):
        per_block_cast_lossless_ref(x, "e4m3", (1, 32), (1, 128), use_packed_ue8m0=True)
    with pytest.raises(ValueError, match="e4m3"):
        per_block_cast_lossless_ref(x, "e2m1", (1, 32), (1, 128))
    bad = x[1].clone()
    bad[2, 1] = 0.75
    with pytest.raises(LosslessScaleError, match="power of two"):
        per_block_cast_lossless_ref((x[0], bad), "e4m3", (1, 32), (1, 128))


def _pow2_sf(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.exp2(torch.randint(-20, 20, shape, generator=g).float())


def _bytes(words):
    """[..., W] int32 -> [..., 4W] uint8 (a fresh row-major copy: size-1 dims may carry odd strides)."""
    return torch.empty(words.shape, dtype=torch.int32).copy_(words).view(torch.uint8)


@pytest.mark.parametrize("bs", [32, 128])
@pytest.mark.parametrize("shape", [(4, 12), (3, 4, 8), (1, 1)])
@pytest.mark.parametrize("tr", [False, True])
def test_transpose_weight_sf_layouts(bs, shape, tr):
    if bs == 32 and (shape[-1] % 4 or shape[-2] % 4):
        pytest.skip("n, k must be multiples of 128")
    s = _pow2_sf(shape)
    (sf0, sf1), = batched_transpose_weight_sf([s], bs, [tr], [None])
    s3 = s if s.dim() == 3 else s[None]
    g, nb, kb = s3.shape
    n, k, k4, n4 = nb * bs, kb * bs, -(-kb // 4), -(-nb // 4)
    lead = (g,) if s.dim() == 3 else ()
    assert sf0.shape == lead + (n, k4) and sf0.stride()[-2:] == (1, n)
    assert sf1.shape == lead + ((n4, k) if tr else (k, n4)) and sf1.stride()[-2:] == ((k, 1) if tr else (1, k))
    e = (s3.view(torch.int32) >> 23) & 0xFF
    b0 = _bytes(sf0.reshape(g, n, k4))
    b1 = _bytes((sf1.transpose(-1, -2) if tr else sf1).reshape(g, k, n4))
    for gi in range(g):
        for r in (0, n - 1, bs):
            if r < n:
                assert b0[gi, r, :kb].tolist() == e[gi, r // bs].tolist()
                assert b0[gi, r, kb:].sum() == 0
        for c in (0, k - 1):
            assert b1[gi, c, :nb].tolist() == e[gi, :, c // bs].tolist()
            assert b1[gi, c, nb:].sum() == 0


def test_transpose_weight_sf_outs_and_errors():
    s = _pow2_sf((2, 8))
    (r0, r1), = batched_transpose_weight_sf([s], 128, [False], [None])
    o0 = torch.empty_strided(r0.shape, r0.stride(), dtype=torch.int32)
    o1 = torch.empty_strided(r1.shape, r1.stride(), dtype=torch.int32)
    (a, b), = batched_transpose_weight_sf([s], 128, [False], [(o0, o1)])
    assert a is o0 and b is o1 and torch.equal(a, r0) and torch.equal(b, r1)
    s[1, 3] = 3.0
    with pytest.raises(LosslessScaleError, match="power of two"):
        batched_transpose_weight_sf([s], 128, [False], [None])
