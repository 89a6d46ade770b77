"""v1 per_channel_cast_fused and FP8-input per_channel_cast on the GPU, bit-exact against the references."""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from kernelkiln.torch.quant_v1 import per_channel_cast_fused_ref

from bitwise import assert_bitwise  # noqa: E402  (tests/ is on sys.path: conftest)

pytestmark = pytest.mark.gpu


def _fp8_input(t, h, g, col_major=False):
    data = (torch.randn(t, h, device="cuda") * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    sf = torch.exp2(torch.randint(-20, 10, (t, h // g), device="cuda").float()) * (1 + torch.rand(t, h // g,
                                                                                             device="cuda"))
    if col_major:  # TMA-aligned column-major, token-sliced (storage [H/g, align(T, 4) + 4])
        store = torch.zeros(h // g, t + 4, device="cuda")
        store[:, :t] = sf.T
        sf = store.T[:t]
    return data, sf


@pytest.mark.parametrize("g", [32, 128])
@pytest.mark.parametrize("gm", [32, 128])
@pytest.mark.parametrize("opt", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("col_major", [False, True])
@pytest.mark.parametrize("shape", [(128, 128), (640, 2048), (4096, 7168)])
def test_fp8_input_per_channel_cast(seed, g, gm, opt, col_major, shape):
    round_sf, packed = opt
    x = _fp8_input(*shape, g, col_major)
    q, sf = kernelkiln.quant.per_channel_cast(x, "e4m3", gm, round_sf=round_sf, num_per_channels=g,
                                            use_packed_ue8m0=packed)
    rq, rsf = ref_cast(x, "e4m3", (gm, 1), x_block_size=(1, g), round_sf=round_sf, use_packed_ue8m0=packed)
    assert_bitwise(q, rq, "data")
    assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("t", [1, 100, 4096])
@pytest.mark.parametrize("h", [128, 7168])
def test_fused_no_gather(seed, fp8, round_sf, t, h):
    if fp8:
        x = _fp8_input(t, h, 128)
    else:
        x = (torch.randn(t, h, device="cuda") * torch.exp2(torch.randint(-20, 12, (1, h), device="cuda").float())
             ).to(torch.bfloat16)
    g = 128 if fp8 else None
    q, sf = kernelkiln.quant.per_channel_cast_fused(x, "e4m3", 128, round_sf=round_sf, num_per_channels=g)
    rq, rsf = per_channel_cast_fused_ref(x, "e4m3", 128, round_sf, g)
    assert_bitwise(q, rq, "data")
    assert_bitwise(sf, rsf, "scales")


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("tn", [(64, 16), (300, 512), (4001, 8 * 4096 + 16)])
def test_fused_gather(seed, fp8, round_sf, tn):
    t, n = tn
    h = 2048
    x = _fp8_input(t, h, 128) if fp8 else torch.randn(t, h, device="cuda").to(torch.bfloat16)
    pos = torch.randint(0, t, (n,), device="cuda", dtype=torch.int32)
    pos[torch.rand(n, device="cuda") < 0.2] = -1
    pos[-16:] = -1  # an all-padding tail (a whole block when n % 128 == 16)
    junk = torch.full((1 << 24,), 0xFF, dtype=torch.uint8, device="cuda")  # poison the allocator
    del junk
    g = 128 if fp8 else None
    q, sf = kernelkiln.quant.per_channel_cast_fused(x, "e4m3", 128, round_sf=round_sf, num_per_channels=g,
                                                  pos_to_token=pos)
    rq, rsf = per_channel_cast_fused_ref(x, "e4m3", 128, round_sf, g, pos)
    assert_bitwise(q, rq, "data")
    assert_bitwise(sf, rsf, "scales")
