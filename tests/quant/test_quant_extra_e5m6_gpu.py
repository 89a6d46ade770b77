"""GPU tests of the E5M6 kernels: bytes bit-identical to kernelkiln.torch.quant_extra (docs/SPEC.md §2.2)."""
import pytest
import torch

import kernelkiln.quant as Q
from kernelkiln.torch.quant_extra import E5M6_MAX, cast_back_from_e5m6, cast_to_e5m6

pytestmark = pytest.mark.gpu

LAYOUTS = [(False, False, False), (False, True, False), (True, True, True)]  # (col-major, round_sf, packed)


def _rand(t, h, dtype, row_stride=None):
    """Values spread over ~40 binades, both signs, never zero (after scaling some fall below E5M6 subnormals)."""
    w = row_stride or h
    mag = torch.pow(2.0, torch.empty(t, w, device="cuda").uniform_(-30, 10)) * (1 + torch.rand(t, w, device="cuda"))
    x = torch.where(torch.rand(t, w, device="cuda") < 0.5, -mag, mag).to(dtype)
    return x[:, :h]


def _same_bytes(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
    assert torch.equal(a.contiguous().view(torch.uint8).cpu(), b.contiguous().view(torch.uint8).cpu())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("t,h", [(0, 64), (1, 8), (7, 576), (513, 7168), (33, 8200), (5, 16384)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_per_token_cast_e5m6_bit_exact(seed, dtype, t, h, layout):
    col, rnd, packed = layout
    x = _rand(t, h, dtype)
    q, sf = Q.per_token_cast(x, "e5m6", h, use_tma_aligned_col_major_sf=col, round_sf=rnd, use_packed_ue8m0=packed)
    rq, rsf = cast_to_e5m6(x.cpu(), h, round_sf=rnd, use_tma_aligned_col_major_sf=col, use_packed_ue8m0=packed)
    _same_bytes(q, rq)
    assert sf.shape == rsf.shape and sf.dtype == rsf.dtype and (t == 0 or sf.stride() == rsf.stride())
    assert torch.equal(sf.cpu(), rsf)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_strided_rows_and_module_level_name(seed, dtype):
    x = _rand(65, 1024, dtype, row_stride=1096)
    q, sf = Q.per_token_cast_to_e5m6(x, 1024)
    rq, rsf = cast_to_e5m6(x.cpu(), 1024)
    _same_bytes(q, rq)
    assert torch.equal(sf.cpu(), rsf)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_special_values(dtype):
    specials = [2.0**-20, 2.0**-14 * 63 / 64, 2.0**-14, -2.0**-20, -2.0**-14 * 63 / 64, -2.0**-14, 1.0, -3.0]
    row = torch.tensor(specials * 4, dtype=torch.float32)
    row[-1] = E5M6_MAX  # the row amax: sf == 1, every special value encodes exactly
    x = row.repeat(3, 1).to(dtype).cuda()
    q, sf = Q.per_token_cast(x, "e5m6", 32)
    assert torch.equal(sf.cpu(), torch.ones(3, 1))
    rq, _ = cast_to_e5m6(x.cpu(), 32)
    _same_bytes(q, rq)
    back = Q.cast_back((q, sf), "fp32", (1, 32), x_special_fmt="e5m6")
    assert torch.equal(back.cpu(), x.float().cpu())


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("t,h", [(0, 64), (1, 8), (9, 576), (257, 7168), (3, 8200)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cast_back_e5m6_bit_exact(seed, fmt, t, h, layout):
    col, rnd, packed = layout
    rq, rsf = cast_to_e5m6(_rand(t, h, torch.float32).cpu(), h, round_sf=rnd, use_tma_aligned_col_major_sf=col,
                           use_packed_ue8m0=packed)
    q, sf = rq.cuda(), rsf.cuda()  # the kernel reads the token stride, whatever the layout
    out = Q.cast_back((q, sf), fmt, (1, h), x_special_fmt="e5m6")
    ref = cast_back_from_e5m6((rq, rsf), fmt, (1, h))
    _same_bytes(out, ref)
    out2 = Q.per_token_cast_back((q, sf), fmt, h, x_special_fmt="e5m6")
    _same_bytes(out2, ref)


def test_cast_back_strided_data_rows(seed):
    rq, rsf = cast_to_e5m6(_rand(17, 1024, torch.float32).cpu(), 1024)
    big = torch.zeros((17, 1536 + 16), dtype=torch.uint8, device="cuda")
    big[:, :1536] = rq.cuda()
    out = Q.cast_back_e5m6((big[:, :1536], rsf.cuda()), "bf16", (1, 1024))
    _same_bytes(out, cast_back_from_e5m6((rq, rsf), "bf16", (1, 1024)))
