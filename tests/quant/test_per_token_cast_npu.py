"""per_token_cast on an Ascend NPU against the bit-exact reference (kernelkiln.torch.cast), byte for byte.

Runs only where torch_npu, the CANN runtime, an Ascend 950 and a store with Ascend binaries exist (CI's ascend job,
`pytest -m npu`); everywhere else it skips with the reason (tests/conftest.py). The variants are the Ascend kernel's
(kernelkiln_contract: PER_TOKEN_CAST.ascend): bf16 input, e4m3 1x128 and e2m1 1x32, fp32 scales (plain and
round_sf) and packed UE8M0, row-major and TMA-aligned column-major."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from bitwise import assert_bitwise  # noqa: E402

pytestmark = pytest.mark.npu

SCALE_OPTIONS = {  # name -> (round_sf, use_packed_ue8m0, col_major)
    "fp32": (False, False, False),
    "fp32-col": (False, False, True),
    "fp32-round": (True, False, False),
    "fp32-round-col": (True, False, True),
    "ue8m0": (True, True, False),
    "ue8m0-col": (True, True, True),
}
FORMATS = [("e4m3", 128), ("e2m1", 32)]


def _input(t, h, stride=None):
    # magnitudes over many binades, plus the special values every path must treat as the reference does
    x = torch.randn(t, stride or h) * torch.exp2(torch.randint(-12, 12, (t, 1)).float())
    if t > 3 and h >= 64:
        x[0, :6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 3e38, 1e-39])
        x[1] = 0.0
        x[2, 1::2] = -0.0
    return x.to(torch.bfloat16)[:, :h]


def _check(x, fmt, g, opt, what=""):
    round_sf, packed, col = SCALE_OPTIONS[opt]
    q, sf = kernelkiln.quant.per_token_cast(x.npu(), fmt, g, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                          use_packed_ue8m0=packed)
    assert q.device.type == "npu" and sf.device.type == "npu"
    rq, rsf = ref_cast(x, fmt, (1, g), round_sf=round_sf, use_tma_aligned_col_major_sf=col, use_packed_ue8m0=packed)
    assert_bitwise(q.cpu(), rq, f"data {what}")
    assert sf.stride() == rsf.stride(), f"{what}: sf strides {sf.stride()} != reference {rsf.stride()}"
    assert_bitwise(sf.cpu(), rsf, f"scales {what}")


@pytest.mark.parametrize("fmt,g", FORMATS)
@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
@pytest.mark.parametrize("shape", [(1, 64), (7, 576), (33, 192), (130, 7168), (4099, 2048)])
def test_per_token_cast_matches_reference(seed, fmt, g, opt, shape):
    for _ in range(2):  # fresh input, second call through any cached plan
        _check(_input(*shape), fmt, g, opt, str(shape))


@pytest.mark.parametrize("fmt,g", FORMATS)
def test_strided_rows(seed, fmt, g):
    x = _input(300, 7168, stride=7168 + 64)
    assert not x.is_contiguous()
    _check(x, fmt, g, "fp32", "strided")


@pytest.mark.parametrize("fmt,g", FORMATS)
def test_token_counts_around_the_tile_size(seed, fmt, g):
    for t in (31, 32, 33, 63, 64, 65, 1000):
        _check(_input(t, 1088), fmt, g, "ue8m0-col", f"T={t}")


def test_amax_clamp_is_read_at_each_call(seed):
    x = _input(64, 512)
    x[3] = 0
    try:
        for clamp in (1e-4, 0.5, 1e-4):
            kernelkiln.set_amax_clamp_for_quant("e4m3", False, clamp)
            q, sf = kernelkiln.quant.per_token_cast(x.npu(), "e4m3", 128)
            rq, rsf = ref_cast(x, "e4m3", (1, 128), clamp_min_value=clamp)
            assert_bitwise(sf.cpu(), rsf, f"scales, clamp {clamp}")
            assert_bitwise(q.cpu(), rq, f"data, clamp {clamp}")
    finally:
        kernelkiln.config.reset_runtime_config()


def test_zero_tokens():
    q, sf = kernelkiln.quant.per_token_cast(torch.empty(0, 256, dtype=torch.bfloat16).npu(), "e4m3", 128)
    assert q.shape == (0, 256) and q.device.type == "npu"
