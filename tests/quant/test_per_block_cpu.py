"""CPU tests: per_block_cast / cast_back / fake-quant references and argument checking (no GPU needed)."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast, cast_back, per_block_cast_ref, per_token_cast_and_cast_back_ref

Q = kernelkiln.quant


def _x(t=256, h=256, dtype=torch.bfloat16):
    return (torch.randn(t, h) * torch.exp2(torch.randint(-6, 6, (t, 1)).float())).to(dtype)


# ------------------------------------------------------------------ references

@pytest.mark.parametrize("block", [(128, 128), (32, 32), (128, 32), (32, 128)])
def test_block_scale_is_amax_over_the_2d_block(seed, block):
    x = _x(256, 256, torch.float32)
    _, sf = per_block_cast_ref(x, "e4m3", block)
    gm, g = block
    amax = x.abs().reshape(256 // gm, gm, 256 // g, g).amax(dim=(1, 3)).clamp_min(1e-4)
    assert torch.equal(sf, amax / torch.full_like(amax, 448.0))


def test_packed_ue8m0_packs_along_k_for_2d_blocks(seed):
    x = _x(256, 512)
    _, sf = per_block_cast_ref(x, "e4m3", (128, 128), round_sf=True, use_packed_ue8m0=True)
    assert sf.dtype == torch.int32 and sf.shape == (2, 1)
    _, sf32 = per_block_cast_ref(x, "e4m3", (128, 128), round_sf=True)
    expected = (sf32.view(torch.int32) >> 23) & 0xFF
    got = sf.view(torch.uint8).reshape(2, 4).to(torch.int32)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("block", [(1, 128), (128, 128), (128, 1), (1, 32)])
@pytest.mark.parametrize("sf_opts", [{}, {"round_sf": True, "use_packed_ue8m0": True},
                                     {"round_sf": True, "use_tma_aligned_col_major_sf": True}])
def test_cast_back_round_trip_bounded(seed, fmt, block, sf_opts):
    if block[1] == 1 and sf_opts.get("use_tma_aligned_col_major_sf"):
        pytest.skip("col-major sf is not allowed for per-channel blocks")
    x = _x(256, 256, torch.float32)
    q = cast(x, fmt, block, **sf_opts)
    y = cast_back(q, "fp32", block)
    assert y.shape == x.shape and y.dtype == torch.float32
    # Decoded values are within one quantization step of the format (relative to the block amax).
    rel = 0.07 if fmt == "e4m3" else 0.26
    _, sf = cast(x, fmt, block, round_sf=True)
    step = sf.repeat_interleave(block[0], 0)[:256].repeat_interleave(block[1], 1)[:, :256]
    limit = step * (448.0 if fmt == "e4m3" else 6.0) * rel
    assert torch.all((y - x).abs() <= limit)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_fake_quant_reference_is_cast_then_cast_back(seed, dtype, fmt):
    x = _x(64, 256, dtype)
    y = x.clone()
    assert per_token_cast_and_cast_back_ref(y, fmt, 32) is None
    expected = cast_back(cast(x, fmt, (1, 32)), "bf16" if dtype == torch.bfloat16 else "fp32", (1, 32))
    assert torch.equal(y.view(torch.uint8), expected.view(torch.uint8))


# ------------------------------------------------------------------ argument checking (raises before any GPU work)

@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(fmt="e5m2"), ValueError, "fmt"),
    (dict(block_size=(64, 128)), ValueError, "block_size"),
    (dict(block_size=128), TypeError, "block_size"),
    (dict(use_packed_ue8m0=True), ValueError, "round_sf"),
    (dict(round_sf=1), TypeError, "round_sf"),
])
def test_per_block_cast_rejects_bad_options(kwargs, exc, words):
    args = dict(x=_x(), fmt="e4m3", block_size=(128, 128))
    args.update(kwargs)
    with pytest.raises(exc, match=words):
        Q.per_block_cast(**args)


@pytest.mark.parametrize("x,exc,words", [
    (torch.zeros(128, 100, dtype=torch.bfloat16), ValueError, "multiple of 64"),
    (torch.zeros(128, 128, dtype=torch.float16), TypeError, "dtype"),
    (torch.zeros(2, 128, 128, dtype=torch.bfloat16), ValueError, "2-D"),
    (torch.zeros(128, 256, dtype=torch.bfloat16)[:, 1:129], ValueError, "stride|aligned"),
    (torch.zeros(128, 128, dtype=torch.bfloat16), ValueError, "CUDA"),
])
def test_per_block_cast_rejects_bad_x(x, exc, words):
    with pytest.raises(exc, match=words):
        Q.per_block_cast(x, "e4m3", (128, 128))


def test_per_block_variants_reject_bad_buffers():
    x = _x()
    with pytest.raises(ValueError, match="out_sf"):
        Q.per_block_cast_with_sf_only(x, "e4m3", (128, 128), out_sf=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="row-major fp32"):
        Q.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), torch.ones(2, 2), round_sf=True,
                                             use_packed_ue8m0=True)
    with pytest.raises(TypeError, match="sf"):
        Q.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="out\\[1\\]"):
        Q.per_block_cast(x, "e4m3", (128, 128), out=(torch.empty(256, 256, dtype=torch.float8_e4m3fn),
                                                     torch.empty(2, 3)))


def test_special_formats_are_checked():
    q = cast(_x(), "e4m3", (1, 128))
    with pytest.raises(TypeError, match="uint8"):  # e5m6 data is packed uint8, not e4m3
        Q.cast_back(q, "bf16", (1, 256), x_special_fmt="e5m6")
    with pytest.raises(ValueError, match="x_special_fmt must be None"):
        Q.per_token_cast_back(q, "bf16", 128, x_special_fmt="e4m3")


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(fmt="fp16"), ValueError, "fmt"),
    (dict(x_block_size=(1, 24)), ValueError, "multiple of 16"),
    (dict(x_block_size=(2, 1)), ValueError, "multiple of 4"),
    (dict(x_block_size=(1, 64)), ValueError, "shape"),
    (dict(x_block_size=None), TypeError, "x_block_size"),
])
def test_cast_back_rejects_bad_arguments(kwargs, exc, words):
    args = dict(x=cast(_x(), "e4m3", (1, 128)), fmt="bf16", x_block_size=(1, 128))
    args.update(kwargs)
    with pytest.raises(exc, match=words):
        Q.cast_back(**args)


def test_cast_back_rejects_bad_tensors():
    q, sf = cast(_x(), "e4m3", (1, 128))
    with pytest.raises(TypeError, match="x\\[0\\]"):
        Q.cast_back((q.float(), sf), "bf16", (1, 128))
    with pytest.raises(TypeError, match="x\\[1\\]"):
        Q.cast_back((q, sf.double()), "bf16", (1, 128))
    with pytest.raises(TypeError, match="pair"):
        Q.cast_back(q, "bf16", (1, 128))
    qc, sfc = cast(_x(), "e4m3", (128, 1))
    with pytest.raises(ValueError, match="column-major"):
        Q.cast_back((qc, sfc.t().contiguous().t()), "bf16", (128, 1))
    with pytest.raises(ValueError, match="CUDA"):
        Q.cast_back((q, sf), "bf16", (1, 128))


def test_fake_quant_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_per_channels"):
        Q.per_token_cast_and_cast_back(_x(), "e4m3", 256)
    with pytest.raises(ValueError, match="round_sf"):
        Q.per_token_cast_and_cast_back(_x(), "e4m3", 128, round_sf=True, use_e4m3_sf=True)
    with pytest.raises(TypeError, match="x"):
        Q.per_token_cast_and_cast_back(_x().half(), "e4m3", 128)
    with pytest.raises(ValueError, match="CUDA"):
        Q.per_token_cast_and_cast_back(_x(), "e4m3", 128)


def test_fake_registrations_give_reference_shapes():
    # Meta tensors dispatch to the register_fake implementations (what torch.compile traces with).
    x = torch.empty(256, 512, dtype=torch.bfloat16, device="meta")
    q, sf = torch.ops.kernelkiln.per_block_cast(x, "e4m3", [128, 128], True, True, True)
    assert q.shape == (256, 512) and sf.shape == (2, 1) and sf.dtype == torch.int32 and sf.stride() == (1, 4)
    data = torch.empty(256, 512, dtype=torch.float8_e4m3fn, device="meta")
    out = torch.ops.kernelkiln.cast_back(data, torch.empty(256, 4, device="meta"), "bf16", [1, 128])
    assert out.shape == (256, 512) and out.dtype == torch.bfloat16
