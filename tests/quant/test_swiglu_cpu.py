"""CPU error paths of the SwiGLU ops: every bad argument is named before any device work."""
import pytest
import torch

from kernelkiln.quant import swiglu_forward, swiglu_forward_and_per_token_cast

X = torch.zeros(8, 256, dtype=torch.bfloat16)
I64 = torch.zeros(4, dtype=torch.int64)


def _q(**kw):
    args = dict(x=X, fmt="e4m3", num_per_channels=128)
    args.update(kw)
    return swiglu_forward_and_per_token_cast(**args)


def _f(**kw):
    args = dict(x=X, fmt="bf16")
    args.update(kw)
    return swiglu_forward(**args)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: _q(x=X.half()), TypeError, "x has dtype"),
    (lambda: _q(x=torch.zeros(8, 192, dtype=torch.bfloat16)), ValueError, "multiple of 64"),
    (lambda: _q(x=torch.zeros(8, 256, dtype=torch.bfloat16)[:, :128].t()), ValueError, r"x\.shape\[1\]|stride"),
    (lambda: _q(x=torch.zeros(2, 8, 256, dtype=torch.bfloat16)), ValueError, "2-D"),
    (lambda: _q(fmt="e2m1"), ValueError, "fmt must be one of"),
    (lambda: _q(num_per_channels=64), ValueError, "num_per_channels must be one of"),
    (lambda: _q(round_sf=1), TypeError, "round_sf must be a bool"),
    (lambda: _q(use_packed_ue8m0=True), ValueError, "requires round_sf"),
    (lambda: _q(psum_num_tokens_per_expert=torch.zeros(2, dtype=torch.int64)), TypeError,
     "psum_num_tokens_per_expert has dtype"),
    (lambda: _q(psum_num_tokens_per_expert=torch.zeros(0, dtype=torch.int32)), ValueError, "non-empty"),
    (lambda: _q(topk_weights=torch.zeros(7)), ValueError, r"topk_weights must be .*\[8\]"),
    (lambda: _q(topk_weights=torch.zeros(8, dtype=torch.bfloat16)), TypeError, "topk_weights has dtype"),
    (lambda: _q(routed_scaling_factor=2.5), ValueError, "requires topk_weights"),
    (lambda: _q(topk_weights=torch.zeros(8), routed_scaling_factor="2"), TypeError, "routed_scaling_factor"),
    (lambda: _q(clamp_value=-1.0), ValueError, "clamp_value must be a finite float >= 0"),
    (lambda: _q(clamp_value=float("inf")), ValueError, "clamp_value"),
    (lambda: _q(clamped_count=I64), ValueError, "clamped_count requires clamp_value"),
    (lambda: _q(clamp_value=1.0, clamped_count=torch.zeros(4, dtype=torch.int32)), TypeError,
     "clamped_count has dtype"),
    (lambda: _q(clamp_value=1.0, clamped_count=torch.zeros(3, dtype=torch.int64)), ValueError, r"shape \(4,\)"),
    (lambda: _q(), ValueError, "CUDA tensor"),
    (lambda: _f(fmt="e4m3"), ValueError, "fmt must be one of"),
    (lambda: _f(fmt="fp16"), ValueError, "fmt must be one of"),
    (lambda: _f(clamped_count=I64), ValueError, "clamped_count requires clamp_value"),
    (lambda: _f(), ValueError, "CUDA tensor"),
])
def test_bad_input_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
