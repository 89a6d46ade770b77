"""Dispatch/combine on the GPU: bit-identical to kernelkiln.torch.fused (mapping slot order included)."""
import pytest
import torch

import kernelkiln
from kernelkiln import config
from kernelkiln.torch import fused as ref

pytestmark = pytest.mark.gpu


def _routing(t, k, e, masked=0.1):
    idx = torch.stack([torch.randperm(e, device="cuda")[:k] for _ in range(t)]) if t and k <= e else \
        torch.randint(0, e, (t, k), device="cuda")
    drop = torch.rand(t, k, device="cuda") < masked
    return torch.where(drop, torch.full_like(idx, -1), idx).to(torch.int64)


def _check_mapping(idx, e, n, align, force_no_sync=False):
    got = kernelkiln.moe.get_fused_mapping(idx, e, n, align, force_no_sync)
    want = ref.get_fused_mapping(idx.cpu(), e, n, align, force_no_sync, num_sms=config.get_num_sms())
    for g, w in zip(got[:7], want[:7]):
        assert g.dtype == torch.int32 and g.shape == w.shape
        assert torch.equal(g.cpu(), w)
    assert got[7] == want[7]
    return got


@pytest.mark.parametrize("t,k,e", [(4001, 8, 32), (4001, 6, 9), (4001, 8, 4), (16384, 8, 256), (1, 8, 8),
                                   (0, 8, 8), (777, 9, 288), (100, 8, 8)])
@pytest.mark.parametrize("align", [64, 128])
def test_mapping_bitwise(seed, t, k, e, align):
    idx = _routing(t, k, e)
    n = (t * k + (align - 1) * e + align - 1) // align * align
    _check_mapping(idx, e, n, align)
    _check_mapping(idx, e, 0, align)  # host-synced, trimmed


def test_mapping_sm_count_and_edge_routings(seed):
    idx = _routing(3000, 8, 32)
    old = config.get_num_sms()
    try:
        for sms in (1, max(1, config.get_device_num_sms() - 20), config.get_device_num_sms()):
            config.set_num_sms(sms)
            _check_mapping(idx, 32, 0, 128)
    finally:
        config.set_num_sms(old)
    _check_mapping(torch.full((500, 8), -1, dtype=torch.int64, device="cuda"), 16, 0, 128)  # all masked
    _check_mapping(torch.full((500, 8), 3, dtype=torch.int64, device="cuda"), 16, 0, 128)  # one expert
    _check_mapping(torch.stack([torch.arange(16, device="cuda")] * 300), 16, 0, 128)  # K = E
    bad = _routing(200, 8, 16)
    bad[0, 0], bad[1, 1] = 99, -7
    _check_mapping(bad, 16, 0, 128)


def test_mapping_is_deterministic(seed):
    idx = _routing(16384, 8, 256)
    a = kernelkiln.moe.get_fused_mapping(idx, 256, 200000, 128)
    b = kernelkiln.moe.get_fused_mapping(idx, 256, 200000, 128)
    assert all(torch.equal(x, y) for x, y in zip(a[:7], b[:7]))


@pytest.mark.parametrize("dtype,h", [(torch.bfloat16, 7168), (torch.float8_e4m3fn, 7168), (torch.float32, 2048),
                                     (torch.bfloat16, 100), (torch.bfloat16, 33), (torch.float32, 576)])
def test_expand_bitwise(seed, dtype, h):
    t, k, e = 513, 8, 32
    idx = _routing(t, k, e)
    p2e, _, _, t2p, *_ = kernelkiln.moe.get_fused_mapping(idx, e, 0, 128)
    x = (torch.randn(t, h, device="cuda") * 4).to(dtype)
    out = kernelkiln.moe.expand_to_fused(x, t2p, p2e)
    want = ref.expand_to_fused(x, t2p, p2e)
    assert out.dtype == dtype and torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    xs = torch.randn(t, 2 * h, device="cuda").to(dtype)[:, :h]  # strided rows
    assert torch.equal(kernelkiln.moe.expand_to_fused(xs, t2p, p2e).view(torch.uint8),
                       ref.expand_to_fused(xs, t2p, p2e).view(torch.uint8))


@pytest.mark.parametrize("g,col,packed", [(128, False, False), (32, False, False), (128, True, False),
                                          (128, True, True)])
def test_expand_with_sf_bitwise(seed, g, col, packed):
    t, k, e, h = 300, 8, 16, 7168
    idx = _routing(t, k, e)
    p2e, _, _, t2p, *_ = kernelkiln.moe.get_fused_mapping(idx, e, 0, 128)
    data = (torch.randn(t, h, device="cuda") * 10).to(torch.float8_e4m3fn)
    h_sf = h // g
    sf = torch.randint(0, 2**31 - 1, (t, h_sf // 4), dtype=torch.int32, device="cuda") if packed else \
        torch.rand(t, h_sf, device="cuda") + 0.1
    out, out_sf = kernelkiln.moe.expand_to_fused_with_sf((data, sf), g, t2p, p2e, col)
    want, want_sf = ref.expand_to_fused_with_sf((data, sf), g, t2p, p2e, col)
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    assert out_sf.shape == want_sf.shape and out_sf.stride() == want_sf.stride()
    assert torch.equal(out_sf.contiguous().view(torch.int32), want_sf.contiguous().view(torch.int32))


def test_expand_zero_tokens():
    p2e = torch.full((128,), -1, dtype=torch.int32, device="cuda")
    out = kernelkiln.moe.expand_to_fused(torch.empty(0, 256, device="cuda"), torch.empty(0, 8, dtype=torch.int32,
                                       device="cuda"), p2e)
    assert out.shape == (128, 256) and not out.any()


@pytest.mark.parametrize("in_dtype,fmt", [(torch.bfloat16, ""), (torch.float32, ""), (torch.bfloat16, "e4m3"),
                                          (torch.float32, "e4m3"), (torch.float8_e4m3fn, "e4m3")])
@pytest.mark.parametrize("weights,with_x_sf", [(True, False), (False, False), (True, True)])
def test_reduce_bitwise(seed, in_dtype, fmt, weights, with_x_sf):
    t, k, e, h = 1000, 8, 32, 7168
    idx = _routing(t, k, e)
    p2e, _, _, t2p, *_ = kernelkiln.moe.get_fused_mapping(idx, e, 0, 128)
    n = p2e.numel()
    # values over many binades so the FMA order shows in the last bits
    x = (torch.randn(n, h, device="cuda") * torch.exp2(torch.randint(-8, 4, (n, 1), device="cuda").float()))
    x = x.to(in_dtype)
    w = torch.rand(t, k, device="cuda") if weights else None
    x_sf = torch.rand(n, device="cuda") * 0.1 if with_x_sf else None
    sf = torch.tensor([0.7], device="cuda") if fmt else None
    arg = (x, x_sf) if with_x_sf else x
    got = kernelkiln.moe.reduce_fused(arg, w, t2p, fmt, sf)
    want = ref.reduce_fused(arg, w, t2p, fmt, sf)
    assert got.dtype == want.dtype and got.shape == (t, h)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    out = torch.full_like(got.view(torch.uint8), 0x7F).view(got.dtype)
    kernelkiln.moe.reduce_fused(arg, w, t2p, fmt, sf, out=out)
    assert torch.equal(out.view(torch.uint8), want.view(torch.uint8))


def test_reduce_saturates_e4m3_and_skips_minus_one(seed):
    x = torch.full((4, 256), 1000.0, device="cuda")
    t2p = torch.tensor([[0, -1], [-1, -1]], dtype=torch.int32, device="cuda")
    got = kernelkiln.moe.reduce_fused(x, None, t2p, "e4m3")
    assert got[0].float().eq(448).all() and got[1].float().eq(0).all()
