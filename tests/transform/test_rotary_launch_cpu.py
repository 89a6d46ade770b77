"""apply_rotary's host side on the CPU: what it hands the driver (through the launch recorder's stand-in, with the
real launch shim and the ci-subset store's launch spec), for 3-D and 4-D inputs, key, positions and conjugate."""
import pytest

from launch_capture import arg_values, capture, pointers

_SCRIPT = r"""
torch.manual_seed(0)
ang = torch.rand(4096, 32) * 6.283
cache = torch.cat((ang.cos(), ang.sin()), dim=1)
q, k = torch.randn(3, 100, 8, 64).to(torch.bfloat16), torch.randn(3, 100, 2, 64).to(torch.bfloat16)
pos = torch.randint(0, 4000, (1, 100), dtype=torch.int32).expand(3, 100)
kernelkiln.transform.apply_rotary(q, cache, k, pos, interleaved=True, conjugate=True, seqlen_offset=5)
out["4d"] = recorder._canonical(rec.launches, [("q", q), ("k", k), ("cache", cache), ("pos", pos)])
rec.launches = []
q3 = torch.randn(77, 128, 64).to(torch.bfloat16)
kernelkiln.transform.apply_rotary(q3, cache, interleaved=True, seqlen_offset=9)
out["3d"] = recorder._canonical(rec.launches, [("q", q3), ("cache", cache)])
"""


@pytest.fixture(scope="module")
def launches(subset_store, tmp_path_factory):
    return capture(_SCRIPT, subset_store, tmp_path_factory)


def test_query_then_key_with_batch_grid_and_vector_strides(launches):
    q_launch, k_launch = launches["4d"]
    for launch, heads, name in ((q_launch, 8, "q"), (k_launch, 2, "k")):
        assert launch["block"] == [128, 1, 1] and launch["symbol"].startswith("apply_rotary_kernel")
        tokens_per_cta = max(1, 128 * 4 // (heads * 8))
        assert launch["grid"] == [-(-100 // tokens_per_cta), 3, 1]
        ptrs = pointers(launch)
        assert f"{name}+0" in ptrs and "cache+0" in ptrs and "pos+0" in ptrs
        ints = arg_values(launch, "int32")
        longs = arg_values(launch, "int64")
        floats = arg_values(launch, "float32")
        assert floats == [-1.0]  # conjugate: the sign of sin
        # strides in units of 4 elements: batch 100 * heads * 64 / 4, sequence heads * 64 / 4, head 16; the broadcast
        # positions' batch stride is 0
        assert 100 * heads * 16 in longs and heads * 16 in longs and 0 in longs
        assert {3, 100, heads, 16, 1, 5, tokens_per_cta} <= set(ints)


def test_three_dimensional_query_without_positions(launches):
    (launch,) = launches["3d"]
    assert launch["grid"] == [77, 1, 1]  # 128 heads x 8 items per token: one token per CTA
    ints = arg_values(launch, "int32")
    assert 0 in ints and 9 in ints  # has_positions = 0, the offset
    assert arg_values(launch, "float32") == [1.0]
