"""Loader features on the GPU through the self-test kernel: TMA descriptor encoded per call,
a buffer-shape symbol bound from the tensor, and a 2-CTA cluster launch."""
import pytest
import torch

from kernelkiln import _selftest
from kernelkiln._runtime import store

pytestmark = pytest.mark.gpu


def test_selftest_spec_uses_tma_and_clusters():
    (entry,) = [e for e in store().variants("selftest_tma_copy") if e["arch"] == "sm_90a"]
    assert entry["spec"]["tensormaps"], "the self-test lost its TMA store"
    assert entry["spec"]["kernels"][0]["cluster_dims"] == [2, 1, 1]


@pytest.mark.parametrize("rows", [64, 100, 1000, 4097])
def test_tma_copy_is_exact(seed, rows):
    for _ in range(2):  # a second call re-encodes the descriptor for a new address
        src = torch.randn(rows, 256, device="cuda")
        assert torch.equal(_selftest.tma_copy(src), src)
