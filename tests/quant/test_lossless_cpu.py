"""Argument checking of per_block_cast_lossless / batched_transpose_weight_sf without a GPU:
every bad input names the argument and what is allowed; valid CPU input fails only on the device."""
import pytest
import torch

import kernelkiln.quant as Q
import kernelkiln.torch as R


def _x(t=128, h=256, packed=False):
    return R.cast(torch.randn(t, h), "e2m1", (1, 32), round_sf=True, use_packed_ue8m0=packed)


def _sf(shape=(2, 4)):
    return torch.ones(shape)


def test_exports():
    for name in ("per_block_cast_lossless", "batched_transpose_weight_sf", "LosslessScaleError", "check_errors"):
        assert name in Q.__all__
    for name in ("per_block_cast_lossless_ref", "batched_transpose_weight_sf", "LosslessScaleError"):
        assert name in R.__all__
    assert issubclass(Q.LosslessScaleError, ValueError)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", (1, 32), (128, 128)), ValueError, "CUDA"),
    (lambda: Q.per_block_cast_lossless(_x(packed=True), "e4m3", (1, 32), (1, 128), True, True, True), ValueError,
     "CUDA"),
    (lambda: Q.per_block_cast_lossless(_x()[0], "e4m3", (1, 32), (1, 128)), TypeError, "pair"),
    (lambda: Q.per_block_cast_lossless(_x(), "e2m1", (1, 32), (1, 128)), ValueError, "fmt"),
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", (1, 16), (1, 128)), ValueError, "x_block_size"),
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", (1, 32), (64, 128)), ValueError, "out_block_size"),
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", (1, 128), (1, 32)), ValueError, "multiple"),
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", [1, 32.0], (1, 128)), TypeError, "x_block_size"),
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", (1, 32), (1, 128), use_packed_ue8m0=True), ValueError,
     "round_sf"),
    (lambda: Q.per_block_cast_lossless(_x(), "e4m3", (1, 32), (1, 128), round_sf=1), TypeError, "round_sf"),
    (lambda: Q.per_block_cast_lossless((_x()[0].view(torch.uint8), _x()[1]), "e4m3", (1, 32), (1, 128)), TypeError,
     "x\\[0\\]"),
    (lambda: Q.per_block_cast_lossless(_x(h=192), "e4m3", (1, 32), (1, 32)), ValueError, "multiple of 128"),
    (lambda: Q.per_block_cast_lossless((_x()[0], _x()[1][:, :4]), "e4m3", (1, 32), (1, 128)), ValueError,
     "x\\[1\\].*shape"),
    (lambda: Q.per_block_cast_lossless((_x()[0], _x()[1].double()), "e4m3", (1, 32), (1, 128)), TypeError,
     "x\\[1\\]"),
    (lambda: Q.per_block_cast_lossless((torch.zeros(4, 72, dtype=torch.int8)[:, :64], torch.ones(4, 4)), "e4m3",
                                       (1, 32), (1, 128)), ValueError, "row stride"),
])
def test_lossless_bad_inputs(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


@pytest.mark.parametrize("call,exc,words", [
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128, [False], [None]), ValueError, "CUDA"),
    (lambda: Q.batched_transpose_weight_sf([], 128, [], []), None, None),
    (lambda: Q.batched_transpose_weight_sf(_sf(), 128, [False], [None]), TypeError, "sequence"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 64, [False], [None]), ValueError, "block_size"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128.0, [False], [None]), TypeError, "block_size"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128, [], [None]), ValueError, "transpose_sf1s"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128, [1], [None]), TypeError, "transpose_sf1s\\[0\\]"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128, [False], None), ValueError, "outs"),
    (lambda: Q.batched_transpose_weight_sf([_sf().double()], 128, [False], [None]), TypeError, "sf\\[0\\]"),
    (lambda: Q.batched_transpose_weight_sf([torch.ones(4)], 128, [False], [None]), ValueError, "sf\\[0\\]"),
    (lambda: Q.batched_transpose_weight_sf([torch.ones(4, 6).T], 128, [False], [None]), ValueError, "contiguous"),
    (lambda: Q.batched_transpose_weight_sf([torch.ones(3, 4)], 32, [False], [None]), ValueError, "multiples of 128"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128, [False], [(torch.zeros(256, 1, dtype=torch.int32),
                                                                      torch.zeros(512, 1, dtype=torch.int32))]),
     ValueError, "outs\\[0\\]\\[0\\].*strides"),
    (lambda: Q.batched_transpose_weight_sf([_sf()], 128, [False], [torch.zeros(2)]), TypeError, "outs\\[0\\]"),
])
def test_transpose_bad_inputs(call, exc, words):
    if exc is None:
        assert call() == []
        return
    with pytest.raises(exc, match=words):
        call()
