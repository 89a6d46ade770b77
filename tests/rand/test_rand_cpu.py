"""kernelkiln.rand: the peer's randn on CUDA is torch.randn under the same generator, and so is ours."""
import pytest
import torch

import kernelkiln


def test_randn_is_torch_randn_of_the_same_generator_state():
    kernelkiln.rand.set_seed(1234)
    a = kernelkiln.rand.randn(3, 5, device="cpu")
    b = kernelkiln.rand.randn((7,), dtype=torch.float64, device="cpu")
    torch.manual_seed(1234)
    assert torch.equal(a, torch.randn(3, 5)) and torch.equal(b, torch.randn(7, dtype=torch.float64))


def test_randn_like_takes_shape_dtype_and_device():
    kernelkiln.rand.set_seed(7)
    x = torch.empty(4, 2, dtype=torch.bfloat16)
    got = kernelkiln.rand.randn_like(x)
    torch.manual_seed(7)
    assert got.dtype == torch.bfloat16 and torch.equal(got, torch.randn(4, 2, dtype=torch.bfloat16))


def test_set_seed_sets_the_counter_the_ascend_seeds_come_from():
    from kernelkiln import rand
    rand.set_seed(5)
    s1 = rand._reserve_seed(8)
    rand.set_seed(5)
    assert rand._reserve_seed(8) == s1 and rand._reserve_seed(1) != s1 and 0 <= s1 < 2**32
    assert rand._seed == 5 + 8 + 1


@pytest.mark.parametrize("call, exc, words", [
    (lambda: kernelkiln.rand.randn(2.0, device="cpu"), TypeError, "size must be ints"),
    (lambda: kernelkiln.rand.randn(-1, device="cpu"), ValueError, "non-negative"),
    (lambda: kernelkiln.rand.randn_like([1, 2]), TypeError, "input must be a torch.Tensor"),
    (lambda: kernelkiln.rand.set_seed("1"), TypeError, "seed must be an int"),
])
def test_bad_arguments(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_default_device_is_the_accelerator():
    assert kernelkiln.config.get_device() == ("npu" if kernelkiln.config.is_ascend() else "cuda")
