"""CPU error paths of norm_forward / norm_forward_and_per_token_cast / norm_backward: every bad
input raises before any device work, naming the argument and what is allowed."""
import pytest
import torch

import kernelkiln.quant as Q

BF16 = torch.bfloat16


def _x(*shape, dtype=BF16):
    return torch.zeros(*shape, dtype=dtype)


def _cast(**kw):
    args = dict(x=_x(4, 128), weight=None, eps=1e-6, fmt="e4m3", num_per_channels=32)
    args.update(kw)
    return lambda: Q.norm_forward_and_per_token_cast(**args)


CASES = [
    (lambda: Q.norm_forward(_x(4, 128, dtype=torch.float16), None, 1e-6), TypeError, "x has dtype torch.float16"),
    (lambda: Q.norm_forward(_x(128), None, 1e-6), ValueError, "2-D"),
    (lambda: Q.norm_forward(_x(4, 120), None, 1e-6), ValueError, "multiple of 16"),
    (lambda: Q.norm_forward(_x(4, 8208), None, 1e-6), ValueError, "<= 8192"),
    (lambda: Q.norm_forward(_x(128, 4).t(), None, 1e-6), ValueError, "inner stride 1"),
    (lambda: Q.norm_forward(_x(4, 132)[:, :128], None, 1e-6), ValueError, "multiples of 8"),
    (lambda: Q.norm_forward(_x(4, 128), _x(64), 1e-6), ValueError, "weight must be a contiguous"),
    (lambda: Q.norm_forward(_x(4, 128), torch.zeros(128), 1e-6), TypeError, "weight has dtype"),
    (lambda: Q.norm_forward(_x(4, 128), None, "1e-6"), TypeError, "eps must be a float"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, out_scale=None), TypeError, "out_scale must be a float"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, residual=torch.zeros(4, 128)), TypeError, "residual has dtype"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, residual=_x(4, 256)), ValueError, "residual must have shape"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, residual_out=_x(4, 128)), ValueError, "residual is None"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, out=_x(4, 64)), ValueError, "out must have shape"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, out=torch.zeros(4, 128)), TypeError, "out has dtype"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6, with_rstd=1), TypeError, "with_rstd must be a bool"),
    (lambda: Q.norm_forward(_x(4, 128), None, 1e-6), ValueError, "is on cpu; KernelKiln kernels need a CUDA tensor"),
    (lambda: Q.norm_forward(_x(2, 3, 128), None, 1e-6, out=_x(2, 4, 128)[:, :3]), ValueError,
     "rows evenly spaced"),
    (_cast(fmt="e2m1"), ValueError, "fmt must be one of"),
    (_cast(num_per_channels=128), ValueError, "num_per_channels must be one of"),
    (_cast(use_packed_ue8m0=True), ValueError, "requires round_sf"),
    (_cast(round_sf=1), TypeError, "round_sf must be a bool"),
    (_cast(mega_moe_block_m=64), ValueError, "needs a mega_moe_sf buffer"),
    (_cast(mega_moe_sf=torch.zeros(128, 1, dtype=torch.int32)), ValueError, "mega_moe_block_m must be a positive"),
    (_cast(mega_moe_sf=torch.zeros(128, 1, dtype=torch.int32), mega_moe_block_m=64), ValueError,
     "requires round_sf=True"),
    (_cast(x=_x(4, 96), mega_moe_sf=torch.zeros(128, 1, dtype=torch.int32), mega_moe_block_m=64, round_sf=True),
     ValueError, "multiple of 128"),
    (_cast(mega_moe_sf=torch.zeros(128, 1), mega_moe_block_m=64, round_sf=True), TypeError, "mega_moe_sf has dtype"),
    (_cast(mega_moe_sf=torch.zeros(127, 1, dtype=torch.int32), mega_moe_block_m=64, round_sf=True), ValueError,
     r"shape \[>= 128, 1\]"),
    (_cast(mega_moe_sf=torch.zeros(128, 2, dtype=torch.int32), mega_moe_block_m=64, round_sf=True), ValueError,
     r"shape \[>= 128, 1\]"),
    (_cast(out_bf16=_x(4, 128)), ValueError, "with_out_bf16=False"),
    (_cast(with_out_bf16=True, out_bf16=torch.zeros(4, 128)), TypeError, "out_bf16 has dtype"),
    (_cast(out=(torch.zeros(4, 128).to(torch.float8_e4m3fn), torch.zeros(4, 3))), ValueError,
     r"out\[1\] must be a contiguous"),
    (_cast(out=(torch.zeros(4, 128).to(torch.float8_e4m3fn), torch.zeros(4, 4)), use_tma_aligned_col_major_sf=True),
     ValueError, "row-major scales only"),
    (_cast(out=torch.zeros(4, 128)), TypeError, "out must be a"),
    (_cast(residual_out=_x(4, 128)), ValueError, "residual is None"),
    (_cast(), ValueError, "is on cpu"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 112), None, torch.zeros(4)), ValueError, "multiple of 32"),
    (lambda: Q.norm_backward(_x(4, 128), _x(2, 4, 128), None, torch.zeros(4)), ValueError, "2-D"),
    (lambda: Q.norm_backward(torch.zeros(4, 128), _x(4, 128), None, torch.zeros(4)), TypeError,
     "out_grad has dtype"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 128), None, torch.zeros(5)), ValueError, "rstd must be"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 128), None, torch.zeros(4, dtype=BF16)), TypeError,
     "rstd has dtype"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 128), None, torch.zeros(4), weight_grad=torch.zeros(128)),
     ValueError, "weight is None"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 128), _x(128), torch.zeros(4), weight_grad=torch.zeros(64)),
     ValueError, "weight_grad must be"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 128), _x(128), torch.zeros(4), residual_out_grad=_x(4, 64)),
     ValueError, "residual_out_grad must have shape"),
    (lambda: Q.norm_backward(_x(4, 128), _x(4, 128), _x(128), torch.zeros(4)), ValueError, "is on cpu"),
]


@pytest.mark.parametrize("call,exc,match", CASES)
def test_bad_input_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_norm_forward_is_registered_for_torch_compile():
    assert hasattr(torch.ops.kernelkiln, "norm_forward")
    with torch._subclasses.fake_tensor.FakeTensorMode():
        x = torch.empty(2, 3, 256, dtype=BF16)
        y, rstd, ro = torch.ops.kernelkiln.norm_forward(x, None, 1e-6, x, 1.0)
        assert y.shape == x.shape and rstd.shape == (2, 3) and ro.shape == x.shape


def test_mega_moe_rows_are_the_spec_layout():
    """docs/SPEC.md: chunks of bm tokens padded to 128 rows, each 128-row tile stored 4 x 32 transposed."""
    from kernelkiln.torch import mega_moe_sf_rows
    for t, bm in ((300, 200), (512, 128), (5, 64), (1000, 384)):
        rows, needed = mega_moe_sf_rows(t, bm)
        assert needed == -(-t // bm) * (-(-bm // 128) * 128)
        assert len(set(rows.tolist())) == t and int(rows.max()) < needed
        for tok in range(t):
            i = tok % bm
            tile = (tok // bm) * (-(-bm // 128) * 128) + (i // 128) * 128
            assert rows[tok] == tile + (i % 32) * 4 + (i % 128) // 32  # token i%128 = 32*q + r at row 4r + q
