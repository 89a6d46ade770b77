"""RMSNorm kernels on the GPU, bit for bit against kernelkiln.torch.norm (run on the CPU as the oracle)."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from kernelkiln.torch import norm_backward_ref, norm_forward_ref

pytestmark = pytest.mark.gpu

HIDDEN = [128, 512, 1536, 7168, 8192]
DTYPES = [torch.bfloat16, torch.float32]


def _bits(t):
    t = t.detach().contiguous().cpu()
    return t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _same(actual, expected, what):
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    a, e = _bits(actual), _bits(expected)
    bad = (a != e).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} of {a.numel()} differ, first at {bad[0].tolist()}"


def _rand(shape, dtype, stride_pad=0):
    """Fresh values spread over binades (never all zeros); optional padded rows (strided)."""
    full = list(shape[:-1]) + [shape[-1] + stride_pad]
    x = torch.randn(full, device="cuda") * torch.exp2(torch.randint(-6, 6, full[:-1] + [1], device="cuda").float())
    return x.to(dtype)[..., :shape[-1]]


def _weight(h, dtype):
    return (1 + 0.2 * torch.randn(h, device="cuda")).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", HIDDEN)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("with_weight", [False, True])
def test_norm_forward_bitwise(seed, dtype, h, residual, with_weight):
    t = 67
    x = _rand((t, h), dtype)
    r = _rand((t, h), dtype) if residual else None
    w = _weight(h, dtype) if with_weight else None
    out, rstd, norm_input = kernelkiln.quant.norm_forward(x, w, 1e-6, residual=r, out_scale=0.75, with_rstd=True)
    eo, er, ei = norm_forward_ref(x.cpu(), None if w is None else w.cpu(), 1e-6,
                                  residual=None if r is None else r.cpu(), out_scale=0.75)
    _same(out, eo, "out")
    _same(rstd, er, "rstd")
    _same(norm_input, ei, "norm_input")
    if not residual:
        assert norm_input is x


@pytest.mark.parametrize("shape", [(0, 7168), (1, 7168), (1, 16), (3, 0 + 48), (2, 5, 1536), (3, 1, 512), (2, 0, 128)])
def test_norm_forward_edge_shapes_and_3d(seed, shape):
    x = _rand(shape, torch.bfloat16)
    w = _weight(shape[-1], torch.bfloat16)
    out, rstd, _ = kernelkiln.quant.norm_forward(x, w, 1e-5, with_rstd=True)
    assert out.shape == x.shape and rstd.shape == x.shape[:-1]
    eo, er, _ = norm_forward_ref(x.cpu(), w.cpu(), 1e-5)
    _same(out, eo, "out")
    _same(rstd, er, "rstd")
    out2, rstd2, _ = kernelkiln.quant.norm_forward(x, w, 1e-5)
    assert rstd2 is None
    _same(out2, eo, "out (no rstd)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_forward_strided_rows_and_poisoned_out(seed, dtype):
    x = _rand((300, 7168), dtype, stride_pad=64)
    r = _rand((300, 7168), dtype, stride_pad=128)
    assert not x.is_contiguous() and not r.is_contiguous()
    w = _weight(7168, dtype)
    out = torch.full((300, 7168), float("nan"), dtype=dtype, device="cuda")
    ro = torch.full((300, 7168), float("nan"), dtype=dtype, device="cuda")
    y, rstd, ni = kernelkiln.quant.norm_forward(x, w, 1e-6, residual=r, out=out, residual_out=ro)
    assert y is out and ni is ro and rstd is None
    eo, _, ei = norm_forward_ref(x.cpu(), w.cpu(), 1e-6, residual=r.cpu())
    _same(out, eo, "out")
    _same(ro, ei, "residual_out")
    # 3-D input whose batch stride is not T * row stride
    x3 = _rand((2, 9, 512), dtype, stride_pad=32)[:, 1:8]
    y3, rstd3, _ = kernelkiln.quant.norm_forward(x3, None, 1e-6, with_rstd=True)
    e3, er3, _ = norm_forward_ref(x3.cpu(), None, 1e-6)
    _same(y3, e3, "3-D out")
    _same(rstd3, er3, "3-D rstd")


SF_OPTIONS = {  # name -> (round_sf, use_packed_ue8m0, col_major)
    "fp32": (False, False, False),
    "fp32-round": (True, False, False),
    "fp32-col": (False, False, True),
    "ue8m0": (True, True, False),
    "ue8m0-col": (True, True, True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [128, 528, 1536, 7168, 8192])
@pytest.mark.parametrize("opt", list(SF_OPTIONS))
@pytest.mark.parametrize("residual", [False, True])
def test_norm_forward_and_per_token_cast_bitwise(seed, dtype, h, opt, residual):
    round_sf, packed, col = SF_OPTIONS[opt]
    t = 45
    x = _rand((t, h), dtype)
    r = _rand((t, h), dtype) if residual else None
    w = _weight(h, dtype)
    (q, sf), ob, rstd, ni = kernelkiln.quant.norm_forward_and_per_token_cast(
        x, w, 1e-6, "e4m3", 32, residual=r, out_scale=1.5, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
        use_packed_ue8m0=packed, with_out_bf16=True, with_rstd=True)
    eo, er, ei = norm_forward_ref(x.cpu(), w.cpu(), 1e-6, residual=None if r is None else r.cpu(), out_scale=1.5)
    eq, esf = ref_cast(eo, "e4m3", (1, 32), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                       use_packed_ue8m0=packed)
    _same(q, eq, "data")
    assert sf.stride() == esf.stride(), f"sf strides {sf.stride()} != reference {esf.stride()}"
    _same(sf, esf, "scales")
    _same(ob, eo.to(torch.bfloat16), "out_bf16")
    _same(rstd, er, "rstd")
    _same(ni, ei, "norm_input")
    # the same data as the unfused pipeline: per_token_cast(norm_forward(x))
    if not col and h % 64 == 0:
        y, _, _ = kernelkiln.quant.norm_forward(x, w, 1e-6, residual=r, out_scale=1.5)
        q2, sf2 = kernelkiln.quant.per_token_cast(y, "e4m3", 32, round_sf=round_sf, use_packed_ue8m0=packed)
        _same(q, q2, "data vs per_token_cast(norm_forward)")
        _same(sf, sf2, "scales vs per_token_cast(norm_forward)")


def test_norm_forward_and_cast_3d_out_buffers_and_edges(seed):
    x = _rand((2, 33, 7168), torch.bfloat16)
    q = torch.full((2, 33, 7168), -1, dtype=torch.int8, device="cuda").view(torch.float8_e4m3fn)
    sf = torch.full((2, 33, 56), -1, dtype=torch.int32, device="cuda")
    (q_, sf_), ob, rstd, ni = kernelkiln.quant.norm_forward_and_per_token_cast(
        x, None, 1e-6, "e4m3", 32, round_sf=True, use_packed_ue8m0=True, out=(q, sf))
    assert q_ is q and sf_ is sf and ob is None and rstd is None and ni is x
    eo, _, _ = norm_forward_ref(x.cpu(), None, 1e-6)
    eq, esf = ref_cast(eo.view(66, 7168), "e4m3", (1, 32), round_sf=True, use_packed_ue8m0=True)
    _same(q.view(66, 7168), eq, "data")
    _same(sf.view(66, 56), esf, "scales")
    for t in (0, 1):
        x = _rand((t, 1552), torch.float32)  # 1552 = 48 blocks of 32 + a 16-wide partial block
        (q, sf), _, _, _ = kernelkiln.quant.norm_forward_and_per_token_cast(x, None, 1e-6, "e4m3", 32, round_sf=True,
                                                                         use_packed_ue8m0=True)
        eo, _, _ = norm_forward_ref(x.cpu(), None, 1e-6)
        eq, esf = ref_cast(eo, "e4m3", (1, 32), round_sf=True, use_packed_ue8m0=True)
        _same(q, eq, f"data T={t}")
        _same(sf, esf, f"scales T={t} (packed pad bytes zero)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h", [128, 512, 1536, 7168, 8192])
@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("with_rog", [False, True])
def test_norm_backward_bitwise(seed, dtype, h, with_weight, with_rog):
    t = 301
    x = _rand((t, h), dtype)
    w = _weight(h, dtype) if with_weight else None
    _, rstd, _ = kernelkiln.quant.norm_forward(x, w, 1e-6, with_rstd=True)
    dy = _rand((t, h), dtype)
    rog = _rand((t, h), dtype) if with_rog else None
    dx, dw = kernelkiln.quant.norm_backward(dy, x, w, rstd, residual_out_grad=rog, out_scale=0.5)
    p = kernelkiln.quant.norm_backward_num_partials(dtype)
    edx, edw = norm_backward_ref(dy.cpu(), x.cpu(), None if w is None else w.cpu(), rstd.cpu(),
                                 residual_out_grad=None if rog is None else rog.cpu(), out_scale=0.5, num_partials=p)
    _same(dx, edx, "x_grad")
    assert dx.is_contiguous()
    if with_weight:
        _same(dw, edw, "weight_grad")
    else:
        assert dw is None


@pytest.mark.parametrize("wg_dtype", DTYPES)
def test_norm_backward_accumulates_weight_grad_and_is_reproducible(seed, wg_dtype):
    t, h = 4099, 7168
    x = _rand((t, h), torch.bfloat16, stride_pad=64)
    dy = _rand((t, h), torch.bfloat16, stride_pad=128)
    w = _weight(h, torch.bfloat16)
    rstd = torch.rand(t, device="cuda") + 0.5
    wg0 = torch.randn(h, device="cuda").to(wg_dtype)
    wg = wg0.clone()
    dx, out = kernelkiln.quant.norm_backward(dy, x, w, rstd, weight_grad=wg)
    assert out is wg
    p = kernelkiln.quant.norm_backward_num_partials(torch.bfloat16)
    edx, ewg = norm_backward_ref(dy.cpu(), x.cpu(), w.cpu(), rstd.cpu(), weight_grad=wg0.cpu(), num_partials=p)
    _same(dx, edx, "x_grad")
    _same(wg, ewg, "weight_grad accumulated")
    for _ in range(3):  # run to run: identical bits
        dx2, dw2 = kernelkiln.quant.norm_backward(dy, x, w, rstd)
        _, dw3 = kernelkiln.quant.norm_backward(dy, x, w, rstd)
        _same(dw2, dw3, "weight_grad reproducible")
        _same(dx2, dx, "x_grad reproducible")


def test_norm_backward_small_token_counts(seed):
    for t in (0, 1, 5):
        x = _rand((t, 1024), torch.float32)
        dy = _rand((t, 1024), torch.float32)
        w = _weight(1024, torch.float32)
        rstd = torch.rand(t, device="cuda") + 0.5
        dx, dw = kernelkiln.quant.norm_backward(dy, x, w, rstd)
        p = kernelkiln.quant.norm_backward_num_partials(torch.float32)
        edx, edw = norm_backward_ref(dy.cpu(), x.cpu(), w.cpu(), rstd.cpu(), num_partials=p)
        _same(dx, edx, f"x_grad T={t}")
        _same(dw, edw, f"weight_grad T={t}")


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("t,bm", [(45, 64), (300, 200), (1024, 256), (1, 128)])
@pytest.mark.parametrize("col_major_view", [False, True])
def test_norm_forward_and_cast_mega_moe_scales(seed, packed, t, bm, col_major_view):
    """The MegaMoE copy of the packed UE8M0 scales, at the spec's rows of a poisoned buffer (given row-major or
    as an M-major view); rows no token maps to keep their poison."""
    from kernelkiln.torch import mega_moe_sf_ref, mega_moe_sf_rows, pack_ue8m0
    h = 1536
    x, w = _rand((t, h), torch.bfloat16), _weight(h, torch.bfloat16)
    _, needed = mega_moe_sf_rows(t, bm)
    rows = needed + 3  # a larger buffer is fine
    base = torch.full((h // 128, rows) if col_major_view else (rows, h // 128), -0x5A5A5A5B, dtype=torch.int32,
                      device="cuda")
    mega = base.t() if col_major_view else base
    (q, sf), _, _, _ = kernelkiln.quant.norm_forward_and_per_token_cast(
        x, w, 1e-6, "e4m3", 32, round_sf=True, use_packed_ue8m0=packed, mega_moe_sf=mega, mega_moe_block_m=bm)
    eo, _, _ = norm_forward_ref(x.cpu(), w.cpu(), 1e-6)
    _, esf = ref_cast(eo, "e4m3", (1, 32), round_sf=True, use_packed_ue8m0=True)
    expected = mega_moe_sf_ref(esf, torch.full((rows, h // 128), -0x5A5A5A5B, dtype=torch.int32), bm)
    _same(mega, expected.to(mega.device), "mega_moe_sf")
    _same(sf if packed else pack_ue8m0(sf), esf.to(sf.device), "scales")
