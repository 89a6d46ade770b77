"""engram_hash, fused_weight and grad_w_reduce's host side on the CPU: what they hand the driver (through the launch
recorder's stand-in, with the real launch shim and the ci-subset store's launch specs, which hold each op's
representative variant)."""
import pytest

from launch_capture import arg_values, capture, pointers

_SCRIPT = r"""
from kernelkiln.torch import make_offsets
ids = torch.randint(0, 1000, (300, 3), dtype=torch.int32)
mult = torch.randint(1, 1000, (2, 3), dtype=torch.int64)
vocab = torch.randint(1, 1000, (2, 2, 8), dtype=torch.int32)
off = make_offsets(vocab)
mask = torch.zeros(300, dtype=torch.bool)
h = kernelkiln.engram.engram_hash(ids, mult, vocab, off, mask)
out["hash"] = recorder._canonical(rec.launches, [("ids", ids), ("mult", mult), ("vocab", vocab), ("off", off),
                                                 ("mask", mask), ("out", h)])
rec.launches = []
kernelkiln.engram.engram_hash(ids[:0], mult, vocab, off, mask[:0])
out["hash_empty"] = len(rec.launches)
wh, we = torch.randn(4, 2560).bfloat16(), torch.randn(4, 2560).bfloat16()
wf = kernelkiln.engram.fused_weight(wh, we)
out["fused"] = recorder._canonical(rec.launches, [("wh", wh), ("we", we), ("wf", wf)])
rec.launches = []
part, gh, ge = torch.randn(133, 4, 2560), torch.zeros(4, 2560), torch.zeros(4, 2560)
kernelkiln.engram.grad_w_reduce(part, wh, we, gh, ge)
out["reduce"] = recorder._canonical(rec.launches, [("part", part), ("wh", wh), ("we", we), ("gh", gh), ("ge", ge)])
"""


@pytest.fixture(scope="module")
def launches(subset_store, tmp_path_factory):
    return capture(_SCRIPT, subset_store, tmp_path_factory)


def test_hash_grid_is_token_blocks_by_layers(launches):
    (launch,) = launches["hash"]
    assert launch["symbol"].startswith("engram_hash_kernel") and launch["block"] == [128, 1, 1]
    assert launch["grid"] == [3, 2, 1]  # ceil(300 / 128) token blocks, 2 layers
    assert {"ids+0", "mult+0", "vocab+0", "off+0", "mask+0", "out+0"} <= set(pointers(launch))
    assert sorted(arg_values(launch, "int32")) == [2, 300]


def test_hash_of_no_tokens_launches_nothing(launches):
    assert launches["hash_empty"] == 0


def test_fused_weight_one_cta_per_256_elements(launches):
    (launch,) = launches["fused"]
    assert launch["grid"] == [4 * 2560 // 256, 1, 1] and launch["block"] == [32, 1, 1]
    assert arg_values(launch, "int32") == [4 * 2560]


def test_grad_w_reduce_partials_and_column_groups(launches):
    (launch,) = launches["reduce"]
    assert launch["block"] == [64, 1, 1] and launch["grid"] == [4 * 2560 // 256, 1, 1]
    assert {"part+0", "wh+0", "we+0", "gh+0", "ge+0"} <= set(pointers(launch))
    assert sorted(arg_values(launch, "int32")) == [133, 4 * 2560 // 4]
