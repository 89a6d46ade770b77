"""quant.cast / quant.per_channel_cast argument checking and fake (meta) shapes, without a GPU.

Every check runs before any device work, so CPU tensors reach the same errors a
CUDA caller would get; a valid CPU call stops at the "needs a CUDA tensor" check.
"""
import pytest
import torch

import kernelkiln.quant as Q

F32, BF16, E4M3 = torch.float32, torch.bfloat16, torch.float8_e4m3fn


def _x(shape=(4, 8), dtype=F32):
    return torch.zeros(shape, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: Q.cast([1.0], BF16), TypeError, "x must be a torch.Tensor"),
    (lambda: Q.cast(_x(), "bfloat16"), TypeError, "dtype must be a torch.dtype"),
    (lambda: Q.cast(_x(), BF16, stochastic_rounding=1), TypeError, "stochastic_rounding must be a bool"),
    (lambda: Q.cast(_x(), torch.float16), ValueError, r"float32 -> torch.bfloat16.*float8_e4m3fn -> torch.float32"),
    (lambda: Q.cast(_x(dtype=BF16), F32, True), ValueError, "stochastic_rounding=True supports"),
    (lambda: Q.cast(_x(dtype=E4M3), BF16, True), ValueError, "stochastic_rounding=True supports"),
    (lambda: Q.cast(_x(dtype=BF16), BF16), ValueError, "cannot cast x of dtype torch.bfloat16 to torch.bfloat16"),
    (lambda: Q.cast(_x((8, 4)).t(), BF16), ValueError, "x must be contiguous"),
    (lambda: Q.cast(_x((3, 3)), BF16, True), ValueError, r"numel\(\) % 4 == 0"),
    (lambda: Q.cast(_x((3, 3)), BF16), ValueError, "CUDA tensor"),  # any numel without stochastic rounding
    (lambda: Q.cast(_x(), E4M3, True), ValueError, "CUDA tensor"),
])
def test_cast_bad_input_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("call,exc,match", [
    (lambda: Q.per_channel_cast(_x((128, 128), dtype=E4M3), "e4m3", 128), TypeError, "x has dtype"),
    (lambda: Q.per_channel_cast(_x((128,)), "e4m3", 128), ValueError, "x must be 2-D"),
    (lambda: Q.per_channel_cast(_x((128, 128)), "e2m1", 128), ValueError, r"fmt must be one of \['e4m3'\]"),
    (lambda: Q.per_channel_cast(_x((128, 128)), "e4m3", 64), ValueError, r"num_per_tokens must be one of \[32, 128\]"),
    (lambda: Q.per_channel_cast(_x((128, 128)), "e4m3", 128.0), TypeError, "num_per_tokens must be an int"),
    (lambda: Q.per_channel_cast(_x((128, 128)), "e4m3", 128, round_sf=1), TypeError, "round_sf must be a bool"),
    (lambda: Q.per_channel_cast(_x((128, 128)), "e4m3", 128, use_packed_ue8m0=True), ValueError,
     "requires round_sf=True"),
    (lambda: Q.per_channel_cast(_x((96, 128)), "e4m3", 32), ValueError, r"T % 128 == 0 and H % 128 == 0"),
    (lambda: Q.per_channel_cast(_x((128, 192)), "e4m3", 32), ValueError, r"T % 128 == 0 and H % 128 == 0"),
    (lambda: Q.per_channel_cast(_x((256, 128))[::2], "e4m3", 32), ValueError, "x must be contiguous"),
    (lambda: Q.per_channel_cast(_x((128, 128)), "e4m3", 128, num_per_channels=128), ValueError,
     "num_per_channels .* must be None"),
    (lambda: Q.per_channel_cast((_x((128, 128), E4M3), _x((128, 1))), "e4m3", 128, num_per_channels=128),
     ValueError, "CUDA tensor"),
    (lambda: Q.per_channel_cast(_x((128, 128), BF16), "e4m3", 32, True, None, True), ValueError, "CUDA tensor"),
])
def test_per_channel_cast_bad_input_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("gm,packed,shape", [(128, False, (2, 256)), (32, False, (8, 256)), (32, True, (2, 256)),
                                             (128, True, (1, 256))])
def test_per_channel_fake_shapes(gm, packed, shape):
    x = torch.empty((256, 256), dtype=BF16, device="meta")
    q, sf = torch.ops.kernelkiln.per_channel_cast(x, "e4m3", gm, packed, packed)
    assert q.shape == (256, 256) and q.dtype == E4M3
    assert tuple(sf.shape) == shape and sf.dtype == (torch.int32 if packed else F32)


def test_cast_fake_shape_and_checks():
    x = torch.empty((3, 8), dtype=F32, device="meta")
    y = torch.ops.kernelkiln.cast(x, E4M3, True)
    assert y.shape == (3, 8) and y.dtype == E4M3
    with pytest.raises(ValueError, match="numel"):
        torch.ops.kernelkiln.cast(torch.empty((3, 3), device="meta"), BF16, True)
