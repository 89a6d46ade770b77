"""CPU tests of the E5M6 references (kernelkiln.torch.quant_extra, docs/SPEC.md §2.2)."""
import pytest
import torch

from kernelkiln.torch.quant_extra import (
    E5M6_MAX,
    cast_back_from_e5m6,
    cast_to_e5m6,
    e5m6_decode,
    e5m6_encode,
    pack_e5m6,
    unpack_e5m6,
)

ALL_FINITE_CODES = torch.tensor([h for h in range(4096) if (h & 0x7FF) < 0x7C0], dtype=torch.int32)


def _rne_7_bits(v):
    """Independent oracle in the normal range: round |v| to 7 significant bits, ties to even."""
    m, e = torch.frexp(v.double())
    return torch.round(m * 128) / 128 * torch.pow(2.0, e.double())


def test_special_values_encode_exactly():
    vals = torch.tensor([2.0**-20, 2.0**-14 * 63 / 64, 2.0**-14, E5M6_MAX, -2.0**-20, -E5M6_MAX, 0.0, -0.0, 1.0])
    codes = e5m6_encode(vals)
    assert codes.tolist() == [1, 63, 64, 0x7BF, 0x801, 0xFBF, 0, 0x800, 0x3C0]
    assert torch.equal(e5m6_decode(codes), vals)


def test_every_finite_code_round_trips():
    v = e5m6_decode(ALL_FINITE_CODES)
    assert torch.equal(e5m6_encode(v), ALL_FINITE_CODES)


def test_normal_range_is_round_to_nearest_even(seed):
    e = torch.randint(-14, 16, (200000,)).float()
    v = (1 + torch.rand(200000)) * torch.pow(2.0, e) * torch.where(torch.rand(200000) < 0.5, -1.0, 1.0)
    v = v.clamp(-E5M6_MAX, E5M6_MAX)
    assert torch.equal(e5m6_decode(e5m6_encode(v)).double(), _rne_7_bits(v))


def test_ties_go_to_even_code():
    lo = e5m6_decode(torch.tensor([0x3C0, 0x3C1], dtype=torch.int32))  # 1 and 1 + 1/64
    mid = (lo[0] + lo[1]) / 2
    assert e5m6_encode(mid.reshape(1)).item() == 0x3C0  # even code keeps the tie
    lo = e5m6_decode(torch.tensor([0x3C1, 0x3C2], dtype=torch.int32))
    assert e5m6_encode(((lo[0] + lo[1]) / 2).reshape(1)).item() == 0x3C2


def test_subnormal_rule_is_applied_as_written():
    # 1.5 * 2**-20 truncates to code 1; its fp32 low 17 bits are 0, so no carry (not RNE-to-even 2).
    assert e5m6_encode(torch.tensor([1.5 * 2.0**-20])).item() == 1
    v = torch.tensor([1.0 + 2.0**-7 + 2.0**-20])  # just above the tie between 1 and 1+1/64: carries
    assert e5m6_encode(v).item() == 0x3C1


def test_pack_layout_matches_spec_words():
    h = torch.tensor([[0xABC, 0x123, 0x456, 0x789, 0xDEF, 0x0F1, 0x234, 0x567]], dtype=torch.int32)
    w0 = (0xABC << 20 | 0x123 << 8 | 0x456 >> 4) & 0xFFFFFFFF
    w1 = (0x456 << 28 | 0x789 << 16 | 0xDEF << 4 | 0x0F1 >> 8) & 0xFFFFFFFF
    w2 = (0x0F1 << 24 | 0x234 << 12 | 0x567) & 0xFFFFFFFF
    expect = b"".join(w.to_bytes(4, "little") for w in (w0, w1, w2))
    assert bytes(pack_e5m6(h)[0].tolist()) == expect
    r = torch.randint(0, 4096, (5, 64), dtype=torch.int32)
    assert torch.equal(unpack_e5m6(pack_e5m6(r)), r)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cast_and_cast_back(seed, dtype):
    x = (torch.randn(9, 64) * torch.pow(2.0, torch.randint(-8, 8, (9, 1)).float())).to(dtype)
    q, sf = cast_to_e5m6(x, 64)
    assert q.dtype == torch.uint8 and q.shape == (9, 96) and sf.shape == (9, 1) and sf.dtype == torch.float32
    amax = x.float().abs().amax(1, keepdim=True)
    assert torch.equal(sf, amax / torch.full_like(amax, E5M6_MAX))
    y = cast_back_from_e5m6((q, sf), "fp32", (1, 64))
    assert ((y - x.float()).abs() <= x.float().abs() * 2.0**-7 + sf * 2.0**-20).all()
    assert cast_back_from_e5m6((q, sf), "bf16").dtype == torch.bfloat16


def test_round_sf_packed_and_col_major():
    x = torch.randn(6, 16)
    x[0] = 0  # all-zero row: the floor keeps sf a positive normal
    q, sf = cast_to_e5m6(x, 16, round_sf=True, use_packed_ue8m0=True, use_tma_aligned_col_major_sf=True)
    assert sf.dtype == torch.int32 and sf.shape == (6, 1) and sf.stride() == (1, 8)
    q2, sf32 = cast_to_e5m6(x, 16, round_sf=True)
    assert torch.equal(q, q2)
    assert torch.equal(sf.reshape(-1) & 0xFF, (sf32.reshape(-1).view(torch.int32) >> 23) & 0xFF)
    assert ((sf.reshape(-1) >> 8) == 0).all()  # unused packed bytes are zero
    assert torch.equal(cast_back_from_e5m6((q, sf), "fp32"), cast_back_from_e5m6((q2, sf32), "fp32"))


def test_special_values_row_with_unit_scale():
    row = torch.tensor([2.0**-20, -2.0**-14 * 63 / 64, 2.0**-14, 3.0, -0.5, 1000.0, 2.0**-17, E5M6_MAX])
    q, sf = cast_to_e5m6(row.reshape(1, 8), 8)
    assert sf.item() == 1.0
    assert torch.equal(cast_back_from_e5m6((q, sf), "fp32")[0], row)


def test_reference_errors():
    with pytest.raises(ValueError, match="multiple of 8"):
        cast_to_e5m6(torch.randn(2, 12))
    with pytest.raises(ValueError, match="num_per_channels"):
        cast_to_e5m6(torch.randn(2, 16), 8)
    with pytest.raises(ValueError, match="round_sf"):
        cast_to_e5m6(torch.randn(2, 16), use_packed_ue8m0=True)
    with pytest.raises(TypeError):
        cast_to_e5m6(torch.randn(2, 16).half())
    q, sf = cast_to_e5m6(torch.randn(2, 16))
    with pytest.raises(ValueError, match="x_block_size"):
        cast_back_from_e5m6((q, sf), "fp32", (1, 8))
    with pytest.raises(ValueError, match="fmt"):
        cast_back_from_e5m6((q, sf), "fp16")
    with pytest.raises(ValueError, match="shape"):
        cast_back_from_e5m6((q, sf[:1]), "fp32")
