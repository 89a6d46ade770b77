"""swiglu_forward[_and_per_token_cast] on the GPU against kernelkiln.torch.swiglu (run on the same device).

The reference's fp32 steps are single IEEE-rounded torch CUDA ops (expf, add, div, mul), the
kernel's are the matching intrinsics, so valid rows must agree bit for bit: fp32/bf16 outputs,
e4m3 data (reference = kernelkiln.torch.cast of the fp32 output, i.e. per_token_cast), scales and
the int64 clamp counts. Padding rows are left unwritten by the op and are not compared.
"""
import pytest
import torch

import kernelkiln
from kernelkiln.torch import cast as ref_cast
from kernelkiln.torch import get_mapping_from_psum
from kernelkiln.torch import swiglu_forward as ref_swiglu
from bitwise import assert_bitwise as _assert_bitwise  # noqa: E402

pytestmark = pytest.mark.gpu

SCALE_OPTIONS = {  # name -> (round_sf, use_packed_ue8m0, col_major)
    "fp32": (False, False, False),
    "fp32-round": (True, False, False),
    "fp32-round-col": (True, False, True),
    "ue8m0": (True, True, False),
    "ue8m0-col": (True, True, True),
}


@pytest.fixture(autouse=True)
def _restore_alignment():
    yield
    kernelkiln.set_token_alignment(128)


def _input(n, hidden, dtype):
    # Rows spread over binades (2^-4 .. 2^4): clamps at 0.5 and 10 both fire, exp spans its range.
    x = torch.randn(n, 2 * hidden, device="cuda") * torch.exp2(torch.randint(-4, 5, (n, 1), device="cuda").float())
    return x.to(dtype)


def _layout(counts, alignment):
    """psum (int32 end offsets) and N for per-expert token counts, experts starting aligned."""
    ends, end = [], 0
    for c in counts:
        start = -(-end // alignment) * alignment
        end = start + c
        ends.append(end)
    n = -(-end // alignment) * alignment + 3  # trailing rows past the last expert are padding too
    return torch.tensor(ends, dtype=torch.int32, device="cuda"), n


def _case(routing, n_plain, alignment):
    """(psum or None, N) for a routing case."""
    if routing == "plain":
        return None, n_plain
    counts = {"experts": [5, 0, 130, 1, 77, 0, 64], "one-expert": [n_plain], "all-empty": [0, 0]}[routing]
    kernelkiln.set_token_alignment(alignment)
    return _layout(counts, alignment)


ROUTINGS = ["plain", "experts", "one-expert", "all-empty"]
WEIGHTS = {"none": (False, None), "w": (True, None), "w-rsf": (True, 2.5)}


def _routing_args(n, routing, weights):
    with_w, rsf = WEIGHTS[weights]
    w = torch.rand(n, device="cuda") if with_w else None
    return w, rsf


def _valid(x, psum, alignment):
    if psum is None:
        return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    return get_mapping_from_psum(x, psum, alignment)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("weights", list(WEIGHTS))
@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
@pytest.mark.parametrize("shape", [(0, 64), (1, 192), (300, 2048)])
def test_swiglu_forward_matches_reference(seed, dtype, fmt, routing, weights, clamp, shape):
    n_plain, hidden = shape
    psum, n = _case(routing, n_plain, 16)
    x = _input(n, hidden, dtype)
    w, rsf = _routing_args(n, routing, weights)
    counts = torch.tensor([1, 2, 3, 4], dtype=torch.int64, device="cuda") if clamp is not None else None
    ref_counts = counts.clone() if counts is not None else None
    y = kernelkiln.quant.swiglu_forward(x, fmt, psum, w, rsf, clamp, counts)
    ry = ref_swiglu(x, psum, w, rsf, clamp, ref_counts, alignment=16)
    assert y.shape == (n, hidden) and y.dtype == {"bf16": torch.bfloat16, "fp32": torch.float32}[fmt]
    valid = _valid(x, psum, 16)
    _assert_bitwise(y[valid], ry.to(y.dtype)[valid], "output")
    if counts is not None:
        assert counts.tolist() == ref_counts.tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("g", [32, 128])
@pytest.mark.parametrize("opt", list(SCALE_OPTIONS))
@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("weights", ["none", "w-rsf"])
@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
@pytest.mark.parametrize("shape", [(0, 64), (1, 64), (77, 192), (4099, 2048)])
def test_swiglu_forward_and_per_token_cast_matches_reference(seed, dtype, g, opt, routing, weights, clamp, shape):
    round_sf, packed, col = SCALE_OPTIONS[opt]
    n_plain, hidden = shape
    psum, n = _case(routing, n_plain, 128)
    x = _input(n, hidden, dtype)
    w, rsf = _routing_args(n, routing, weights)
    counts = torch.tensor([7, 0, 0, 9], dtype=torch.int64, device="cuda") if clamp is not None else None
    ref_counts = counts.clone() if counts is not None else None
    q, sf = kernelkiln.quant.swiglu_forward_and_per_token_cast(
        x, "e4m3", g, psum, w, rsf, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
        use_packed_ue8m0=packed, clamp_value=clamp, clamped_count=counts)
    ry = ref_swiglu(x, psum, w, rsf, clamp, ref_counts, alignment=128)
    rq, rsf_ = ref_cast(ry, "e4m3", (1, g), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                        use_packed_ue8m0=packed)
    valid = _valid(x, psum, 128)
    assert sf.stride() == rsf_.stride(), f"sf strides {sf.stride()} != reference {rsf_.stride()}"
    _assert_bitwise(q[valid], rq[valid], "data")
    _assert_bitwise(sf[valid], rsf_[valid], "scales")
    if counts is not None:
        assert counts.tolist() == ref_counts.tolist()


def test_quantized_output_equals_per_token_cast_of_fp32_output(seed):
    """The fused op is per_token_cast of swiglu_forward(fmt='fp32'), kernel against kernel."""
    x = _input(1000, 2048, torch.bfloat16)
    w = torch.rand(1000, device="cuda")
    y = kernelkiln.quant.swiglu_forward(x, "fp32", None, w, 2.5, 10.0)
    q, sf = kernelkiln.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, None, w, 2.5, round_sf=True,
                                                             clamp_value=10.0)
    pq, psf = kernelkiln.quant.per_token_cast(y, "e4m3", 128, round_sf=True)
    _assert_bitwise(q, pq, "data")
    _assert_bitwise(sf, psf, "scales")


def test_counts_are_deterministic_and_int64(seed):
    x = _input(8192, 2048, torch.bfloat16)
    results = []
    for _ in range(3):
        c = torch.zeros(4, dtype=torch.int64, device="cuda")
        kernelkiln.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, clamp_value=0.5, clamped_count=c)
        results.append(c.tolist())
    assert results[0] == results[1] == results[2]
    assert results[0][3] == 8192 * 2048
