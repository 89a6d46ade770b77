"""GPU tests of per_block_cast_lossless and batched_transpose_weight_sf: bytes bit-identical to
kernelkiln.torch.quant_lossless, and scale errors raised as LosslessScaleError without killing the context."""
import pytest
import torch

import kernelkiln.quant as Q
import kernelkiln.torch as R

pytestmark = pytest.mark.gpu

OUT_BLOCKS = [(1, 32), (1, 128), (32, 32), (32, 128), (128, 128)]
LAYOUTS = [(False, True, False), (True, True, True), (False, False, False)]  # (col-major, round_sf, packed)


def _mxfp4(t, h, packed=False, col=False, spread=10, row_stride=None):
    """MXFP4 (1, 32) input on the GPU: every e2m1 code and sign, scale exponents spread over ``spread``
    binades (<= 11 keeps every out block exact) around a random level per 128-row group."""
    w = (row_stride or h) // 2
    data = torch.randint(-128, 128, (t, w), dtype=torch.int16, device="cuda").to(torch.int8)[:, :h // 2]
    level = torch.randint(-100, 100, (-(-t // 128), 1), device="cuda").repeat_interleave(128, 0)[:t]
    e = level + torch.randint(0, spread + 1, (t, h // 32), device="cuda")
    sf = torch.exp2(e.float())
    if packed:  # UE8M0 bytes, four per int32 along K (pad bytes 0)
        b = torch.zeros(t, -(-h // 128) * 4, dtype=torch.uint8, device="cuda")
        b[:, :h // 32] = (e + 127).to(torch.uint8)
        sf = b.view(torch.int32)
    if col:
        sf = R.quant._to_tma_col_major(sf)
    return data, sf


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.stride() == b.stride() or a.numel() <= 1
    fa = torch.empty(a.shape, dtype=a.dtype).copy_(a.cpu())
    fb = torch.empty(b.shape, dtype=b.dtype).copy_(b.cpu())
    assert torch.equal(fa.view(torch.uint8) if fa.element_size() == 1 else fa.view(torch.int32),
                       fb.view(torch.uint8) if fb.element_size() == 1 else fb.view(torch.int32))


@pytest.mark.parametrize("t,h", [(0, 128), (1, 128), (130, 512), (512, 7168), (257, 2048)])
@pytest.mark.parametrize("ob", OUT_BLOCKS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("in_layout", [(False, False), (True, False), (False, True), (True, True)])
def test_per_block_cast_lossless_bit_exact(seed, t, h, ob, layout, in_layout):
    col, rnd, packed = layout
    x = _mxfp4(t, h, packed=in_layout[1], col=in_layout[0])
    q, sf = Q.per_block_cast_lossless(x, "e4m3", (1, 32), ob, col, rnd, packed)
    rq, rsf = R.per_block_cast_lossless_ref((x[0].cpu(), x[1].cpu()), "e4m3", (1, 32), ob, col, rnd, packed)
    torch.cuda.synchronize()
    Q.check_errors()
    _same(q, rq)
    _same(sf, rsf)


@pytest.mark.parametrize("xb,ob", [((1, 128), (128, 128)), ((32, 32), (128, 128)), ((32, 32), (32, 128))])
def test_coarser_input_blocks(seed, xb, ob):
    t, h = 256, 1024
    data = torch.randint(-128, 128, (t, h // 2), dtype=torch.int16, device="cuda").to(torch.int8)
    sf = torch.exp2(torch.randint(-20, -10, (t // xb[0], h // xb[1]), device="cuda").float())
    q, s = Q.per_block_cast_lossless((data, sf), "e4m3", xb, ob, round_sf=True)
    rq, rs = R.per_block_cast_lossless_ref((data.cpu(), sf.cpu()), "e4m3", xb, ob, round_sf=True)
    _same(q, rq)
    _same(s, rs)


def test_strided_rows_and_cast_back(seed):
    data, sf = _mxfp4(256, 1024, row_stride=1280)
    q, s = Q.per_block_cast_lossless((data, sf), "e4m3", (1, 32), (128, 128), round_sf=True)
    assert torch.equal(Q.cast_back((q, s), "fp32", (128, 128)), Q.cast_back((data.contiguous(), sf), "fp32", (1, 32)))


def test_spread_error_is_raised_and_context_survives(seed):
    data, sf = _mxfp4(128, 256)
    sf[5, 0], sf[5, 1] = 2.0**20, 2.0**8  # spread 12 in the (1, 128) block of row 5
    Q.per_block_cast_lossless((data, sf), "e4m3", (1, 32), (1, 128), round_sf=True)
    with pytest.raises(Q.LosslessScaleError, match="row 5"):
        Q.check_errors()
    Q.check_errors()  # the error was consumed
    q, s = Q.per_block_cast_lossless(_mxfp4(128, 256), "e4m3", (1, 32), (1, 128), round_sf=True)  # still usable
    torch.cuda.synchronize()


def test_not_power_of_two_scale_is_raised_at_next_call(seed):
    data, sf = _mxfp4(128, 256)
    sf[7, 2] *= 1.5  # same binade, mantissa bits set: only the power-of-two check fires
    Q.per_block_cast_lossless((data, sf), "e4m3", (1, 32), (32, 32), round_sf=True)
    torch.cuda.synchronize()
    with pytest.raises(Q.LosslessScaleError, match="power of two"):
        Q.per_block_cast_lossless(_mxfp4(128, 256), "e4m3", (1, 32), (32, 32), round_sf=True)


def _pow2_sf(shape):
    return torch.exp2(torch.randint(-40, 40, shape, device="cuda").float())


WEIGHTS = [(256, 16, 56), (8, 56, 16), (4, 32, 56), (1, 3, 5), (0, 16, 16)]  # (G, n/bs, k/bs), bs = 128


@pytest.mark.parametrize("bs", [32, 128])
def test_batched_transpose_weight_sf_bit_exact(seed, bs):
    shapes = [(g, nb * 128 // bs, kb * 128 // bs) for g, nb, kb in WEIGHTS]
    sf = [_pow2_sf(s) for s in shapes] + [_pow2_sf((16, 8)), _pow2_sf((1, 1)) if bs == 128 else _pow2_sf((4, 4))]
    tr = [i % 2 == 1 for i in range(len(sf))]
    got = Q.batched_transpose_weight_sf(sf, bs, tr, [None] * len(sf))
    ref = R.batched_transpose_weight_sf([s.cpu() for s in sf], bs, tr, [None] * len(sf))
    Q.check_errors()
    for (a0, a1), (b0, b1) in zip(got, ref):
        _same(a0, b0)
        _same(a1, b1)
        for t in (a0, a1):
            assert t.data_ptr() % 32 == 0
    pool = {t.untyped_storage().data_ptr() for pair in got for t in pair if t.numel()}
    assert len(pool) == 1  # one pooled buffer


def test_batched_transpose_weight_sf_outs_in_place(seed):
    sf = [_pow2_sf((4, 16, 56)), _pow2_sf((56, 16))]
    fresh = Q.batched_transpose_weight_sf(sf, 128, [False, True], [None, None])
    outs = [tuple(torch.empty_strided(t.shape, t.stride(), dtype=torch.int32, device="cuda").fill_(-1) for t in pair)
            for pair in fresh]  # poisoned, exact strides, fresh allocations (256-byte aligned)
    got = Q.batched_transpose_weight_sf(sf, 128, [False, True], outs)
    for (a0, a1), (o0, o1), (f0, f1) in zip(got, outs, fresh):
        assert a0 is o0 and a1 is o1
        _same(a0, f0)
        _same(a1, f1)


def test_batched_transpose_weight_sf_not_power_of_two(seed):
    sf = [_pow2_sf((16, 56)), _pow2_sf((2, 16, 16))]
    sf[1][1, 3, 4] = 3.0
    Q.batched_transpose_weight_sf(sf, 128, [False, False], [None, None])
    with pytest.raises(Q.LosslessScaleError, match=r"sf\[1\]"):
        Q.check_errors()
    Q.batched_transpose_weight_sf([_pow2_sf((16, 56))], 128, [False], [None])
    Q.check_errors()
