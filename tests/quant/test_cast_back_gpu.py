"""cast_back / per_token_cast_back / per_token_cast_and_cast_back on the GPU, bit-exact against kernelkiln.torch."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from kernelkiln.torch import cast_back as ref_cast_back
from kernelkiln.torch import per_token_cast_and_cast_back_ref
from bitwise import assert_bitwise as _assert_bitwise  # noqa: E402

pytestmark = pytest.mark.gpu

SF_OPTIONS = {  # name -> cast kwargs producing that scale storage / layout
    "fp32": {},
    "fp32-col": {"use_tma_aligned_col_major_sf": True},
    "e4m3sf": {"use_e4m3_sf": True},
    "ue8m0": {"round_sf": True, "use_packed_ue8m0": True},
    "ue8m0-col": {"round_sf": True, "use_packed_ue8m0": True, "use_tma_aligned_col_major_sf": True},
}


def _input(t, h, dtype=torch.float32, stride=None):
    x = torch.randn(t, stride or h, device="cuda") * torch.exp2(torch.randint(-8, 8, (t, 1), device="cuda").float())
    return x.to(dtype)[:, :h]


def _quantized(t, h, fmt, block, opt):
    return ref_cast(_input(t, h), fmt, block, **SF_OPTIONS[opt])


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("out", ["bf16", "fp32"])
@pytest.mark.parametrize("block", [(1, 128), (1, 32), (1, 16), (128, 128), (32, 32), (128, 1), (32, 1)])
@pytest.mark.parametrize("opt", list(SF_OPTIONS))
@pytest.mark.parametrize("shape", [(1, 64), (130, 7168), (257, 2048)])
def test_cast_back_matches_reference(seed, fmt, out, block, opt, shape):
    if block[1] == 1 and "col" in opt:
        pytest.skip("column-major sf is not allowed for per-channel blocks")
    if opt == "e4m3sf" and block[0] > 1:
        pytest.skip("e4m3 scales are a per-token (1 x g) format")
    x = _quantized(*shape, fmt, block, opt)
    y = kernelkiln.quant.cast_back(x, out, block)
    _assert_bitwise(y, ref_cast_back(x, out, block), "cast_back")


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("g", [32, 128])
def test_per_token_cast_back_matches_reference(seed, fmt, g):
    x = _quantized(300, 4096, fmt, (1, g), "ue8m0")
    _assert_bitwise(kernelkiln.quant.per_token_cast_back(x, "bf16", g), ref_cast_back(x, "bf16", (1, g)), "per-token")


def test_special_values_decode():
    # Every e4m3 byte except NaN (0x7F / 0xFF): +-0, subnormals, the max, under several scales.
    codes = torch.arange(256, dtype=torch.int32)
    codes = codes[(codes & 0x7F) != 0x7F].to(torch.uint8)
    data = codes.repeat(2 * 128 * 256 // codes.numel() + 1)[:256 * 256].reshape(256, 256)
    data = data.view(torch.float8_e4m3fn).cuda()
    sf = torch.exp2(torch.randint(-20, 20, (2, 2), device="cuda").float())
    for out in ("bf16", "fp32"):
        y = kernelkiln.quant.cast_back((data, sf), out, (128, 128))
        _assert_bitwise(y, ref_cast_back((data, sf), out, (128, 128)), out)


def test_strided_data_rows(seed):
    q, sf = ref_cast(_input(256, 7168), "e4m3", (1, 128))
    wide = torch.empty(256, 7168 + 128, dtype=torch.float8_e4m3fn, device="cuda")
    wide[:, :7168] = q
    y = kernelkiln.quant.cast_back((wide[:, :7168], sf), "bf16", (1, 128))
    _assert_bitwise(y, ref_cast_back((q, sf), "bf16", (1, 128)), "strided")


def test_zero_tokens():
    q = torch.empty(0, 7168, dtype=torch.float8_e4m3fn, device="cuda")
    assert kernelkiln.quant.cast_back((q, torch.empty(0, 56, device="cuda")), "bf16", (1, 128)).shape == (0, 7168)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("g", [16, 32, 64, 128])
@pytest.mark.parametrize("scales", ["fp32", "round", "e4m3sf"])
@pytest.mark.parametrize("shape", [(1, 64), (300, 7168)])
def test_fake_quant_matches_reference(seed, dtype, fmt, g, scales, shape):
    x = _input(*shape, dtype)
    opts = {"round_sf": scales == "round", "use_e4m3_sf": scales == "e4m3sf"}
    expected = x.clone()
    per_token_cast_and_cast_back_ref(expected, fmt, g, **opts)
    assert kernelkiln.quant.per_token_cast_and_cast_back(x, fmt, g, **opts) is None
    _assert_bitwise(x, expected, "fake quant")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("g,scales", [(128, "fp32"), (32, "round")])
def test_fake_quant_one_pass_with_special_values(seed, dtype, fmt, g, scales, monkeypatch):
    """The default manifest's settings take the one-pass kernel (per_token_cast + cast_back never run);
    131 tokens leave a partial last CTA; rows of zeros, signed zeros, NaN, inf and tiny values."""
    from kernelkiln.quant import _per_token
    monkeypatch.setattr(_per_token, "per_token_cast", lambda *a, **k: pytest.fail("took the two-kernel path"))
    x = _input(131, 2048, dtype)
    x[3] = 0
    x[4, ::2] = -0.0
    x[5, 7] = float("nan")
    x[6, 100] = float("inf")
    x[7, 200] = -float("inf")
    x[8] = x[8] * 1e-30
    opts = {"round_sf": scales == "round"}
    expected = x.clone()
    per_token_cast_and_cast_back_ref(expected, fmt, g, **opts)
    kernelkiln.quant.per_token_cast_and_cast_back(x, fmt, g, **opts)
    _assert_bitwise(x, expected, "one-pass fake quant")


def test_fake_quant_strided_rows_in_place(seed):
    base = _input(256, 7168 + 64, torch.bfloat16)
    x = base[:, :7168]
    keep = base[:, 7168:].clone()
    expected = x.clone()
    per_token_cast_and_cast_back_ref(expected, "e4m3", 128)
    kernelkiln.quant.per_token_cast_and_cast_back(x, "e4m3", 128)
    _assert_bitwise(x, expected, "fake quant")
    assert torch.equal(base[:, 7168:], keep), "columns outside x were written"
