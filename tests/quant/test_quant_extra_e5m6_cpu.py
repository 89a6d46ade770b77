"""E5M6 runtime argument checking without a GPU: every bad input names the argument and what is allowed."""
import pytest
import torch

import kernelkiln.quant as Q
from kernelkiln.torch.quant_extra import cast_to_e5m6


def _x(t=4, h=64, dtype=torch.bfloat16):
    return torch.randn(t, h).to(dtype)


def test_exports():
    assert "per_token_cast_to_e5m6" in Q.__all__ and "cast_back_e5m6" in Q.__all__


@pytest.mark.parametrize("call,exc,words", [
    (lambda: Q.per_token_cast(_x(), "e5m6", 64), ValueError, "CUDA"),  # every check passed: only the device is wrong
    (lambda: Q.per_token_cast_to_e5m6(_x(), 64, round_sf=True, use_packed_ue8m0=True), ValueError, "CUDA"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 32), ValueError, "num_per_channels.*64"),
    (lambda: Q.per_token_cast(_x(h=12), "e5m6", 12), ValueError, "multiple of 8"),
    (lambda: Q.per_token_cast(_x(dtype=torch.float16), "e5m6", 64), TypeError, "x has dtype"),
    (lambda: Q.per_token_cast(_x()[0], "e5m6", 64), ValueError, "2-D"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64, use_packed_ue8m0=True), ValueError, "round_sf"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64, use_e4m3_sf=True), ValueError, "use_e4m3_sf"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64, stochastic_cast=True), ValueError, "stochastic_cast"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64, x_block_size=(1, 64)), ValueError, "x_block_size"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64, out=(None, None)), ValueError, "out"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64, round_sf=1), TypeError, "round_sf"),
    (lambda: Q.per_token_cast(_x(), "e5m6", 64.0), TypeError, "num_per_channels"),
    (lambda: Q.per_token_cast(torch.randn(4, 68)[:, :64], "e5m6", 64), ValueError, "row stride"),
    (lambda: Q.per_token_cast(_x(t=8).t(), "e5m6", 8), ValueError, "inner stride"),
])
def test_per_token_cast_e5m6_errors(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def _q(t=4, h=64):
    return cast_to_e5m6(torch.randn(t, h), h)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: Q.cast_back(_q(), "bf16", (1, 64), x_special_fmt="e5m6"), ValueError, "CUDA"),
    (lambda: Q.per_token_cast_back(_q(), "fp32", 64, x_special_fmt="e5m6"), ValueError, "CUDA"),
    (lambda: Q.cast_back_e5m6(_q(), "bf16", (1, 64)), ValueError, "CUDA"),
    (lambda: Q.cast_back(_q(), "fp16", (1, 64), x_special_fmt="e5m6"), ValueError, "fmt must be one of"),
    (lambda: Q.cast_back(_q(), "bf16", (1, 32), x_special_fmt="e5m6"), ValueError, r"x_block_size must be \(1, 64\)"),
    (lambda: Q.cast_back(_q(), "bf16", 64, x_special_fmt="e5m6"), TypeError, "x_block_size"),
    (lambda: Q.cast_back(_q()[0], "bf16", (1, 64), x_special_fmt="e5m6"), TypeError, "pair"),
    (lambda: Q.cast_back((_q()[0].view(torch.int8), _q()[1]), "bf16", (1, 64), x_special_fmt="e5m6"), TypeError,
     r"x\[0\]"),
    (lambda: Q.cast_back((_q()[0], _q()[1].double()), "bf16", (1, 64), x_special_fmt="e5m6"), TypeError, r"x\[1\]"),
    (lambda: Q.cast_back((_q()[0], torch.ones(3, 1)), "bf16", (1, 64), x_special_fmt="e5m6"), ValueError,
     r"x\[1\].*shape"),
    (lambda: Q.cast_back((_q()[0][:, :90], _q()[1]), "bf16", (1, 60), x_special_fmt="e5m6"), ValueError,
     "multiple of 12"),
])
def test_cast_back_e5m6_errors(call, exc, words):
    with pytest.raises(exc, match=words):
        call()
