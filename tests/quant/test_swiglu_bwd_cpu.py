"""CPU checks of the SwiGLU backward ops: argument errors (named before any device work), the
fixed reference (kernelkiln.torch.swiglu.swiglu_backward) and the fake implementations of the
torch.library ops of the swiglu forward and backward pairs."""
import pytest
import torch

from kernelkiln.quant import swiglu_backward, swiglu_backward_and_per_token_cast
from kernelkiln.torch import swiglu as ref

N, HID = 8, 128
XQ = torch.zeros(N, 2 * HID, dtype=torch.float8_e4m3fn)
SF = torch.ones(N, 2 * HID // 128)
DY = torch.zeros(N, HID, dtype=torch.bfloat16)
XF = torch.zeros(N, 2 * HID, dtype=torch.bfloat16)


def _q(**kw):
    args = dict(x=(XQ, SF), act_x_grad=DY, fmt="e4m3", num_per_channels=128)
    args.update(kw)
    return swiglu_backward_and_per_token_cast(**args)


def _f(**kw):
    args = dict(x=XF, act_x_grad=DY, fmt="bf16")
    args.update(kw)
    return swiglu_backward(**args)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: _q(x=XQ), TypeError, "QuantTensor"),
    (lambda: _q(x=(XQ.to(torch.bfloat16), SF)), TypeError, r"x\[0\] has dtype"),
    (lambda: _q(fmt="e2m1"), ValueError, "fmt must be one of"),
    (lambda: _q(num_per_channels=64), ValueError, "num_per_channels must be one of"),
    (lambda: _q(x=(torch.zeros(N, 192, dtype=torch.float8_e4m3fn), SF)), ValueError, "multiple of 64"),
    (lambda: _q(x=(torch.zeros(N, 128, dtype=torch.float8_e4m3fn), SF), act_x_grad=DY[:, :64]), ValueError,
     "multiple of num_per_channels"),
    (lambda: _q(x=(torch.zeros(N, 2 * HID + 8, dtype=torch.float8_e4m3fn)[:, :2 * HID], SF)), ValueError, "stride"),
    (lambda: _q(x=(torch.zeros(2, 2, 2, 2 * HID, dtype=torch.float8_e4m3fn), SF)), ValueError, "2-D"),
    (lambda: _q(x=(XQ, torch.ones(N, 4))), ValueError, r"x\[1\] .*\(8, 2\)"),
    (lambda: _q(x=(XQ, torch.ones(N, 2, dtype=torch.float64))), TypeError, r"x\[1\] has dtype"),
    (lambda: _q(x=(XQ, torch.ones(2, N).t())), ValueError, "row-major"),
    (lambda: _q(act_x_grad=DY.half()), TypeError, "act_x_grad has dtype"),
    (lambda: _q(act_x_grad=DY[:4]), ValueError, "act_x_grad must hold N = 8"),
    (lambda: _q(act_x_grad=torch.zeros(N, 64, dtype=torch.bfloat16)), ValueError, "act_x_grad must be 2-D"),
    (lambda: _q(round_sf=1), TypeError, "round_sf must be a bool"),
    (lambda: _q(use_packed_ue8m0=True), ValueError, "requires round_sf"),
    (lambda: _q(use_tma_aligned_col_major_sf=None), TypeError, "use_tma_aligned_col_major_sf must be a bool"),
    (lambda: _q(do_recompute=1), TypeError, "do_recompute must be a bool"),
    (lambda: _q(psum_num_tokens_per_expert=torch.zeros(2, dtype=torch.int64)), TypeError,
     "psum_num_tokens_per_expert has dtype"),
    (lambda: _q(psum_num_tokens_per_expert=torch.zeros(0, dtype=torch.int32)), ValueError, "non-empty"),
    (lambda: _q(topk_weights=torch.zeros(7)), ValueError, r"topk_weights must be .*\[8\]"),
    (lambda: _q(topk_weights=torch.zeros(N, dtype=torch.bfloat16)), TypeError, "topk_weights has dtype"),
    (lambda: _q(routed_scaling_factor=2.5), ValueError, "requires topk_weights"),
    (lambda: _q(topk_weights=torch.zeros(N), routed_scaling_factor="2"), TypeError, "routed_scaling_factor"),
    (lambda: _q(clamp_value=-1.0), ValueError, "clamp_value must be a finite float >= 0"),
    (lambda: _q(clamp_value=float("nan")), ValueError, "clamp_value"),
    (lambda: _q(clamp_value="1"), TypeError, "clamp_value must be a float"),
    (lambda: _q(), ValueError, "CUDA tensor"),
    (lambda: _f(x=XQ), TypeError, "x has dtype"),
    (lambda: _f(fmt="e4m3"), ValueError, "fmt must be one of"),
    (lambda: _f(act_x_grad=DY.float()), TypeError, "must match x"),
    (lambda: _f(x=torch.zeros(N, 2 * HID, dtype=torch.bfloat16).t().contiguous().t()), ValueError, "stride"),
    (lambda: _f(do_recompute="yes"), TypeError, "do_recompute must be a bool"),
    (lambda: _f(), ValueError, "CUDA tensor"),
])
def test_bad_input_names_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _autograd_grads(x, dy, w, rsf, clamp):
    """float64 autograd of the forward definition (clamp as an identity-free select)."""
    x = x.double().requires_grad_(True)
    wt = w.double().requires_grad_(True) if w is not None else None
    i = x.shape[1] // 2
    a, u = x[:, :i], x[:, i:]
    if clamp is not None:
        a = torch.where(a > clamp, torch.full_like(a, clamp), a)
        u = torch.where(u > clamp, torch.full_like(u, clamp), torch.where(u < -clamp, torch.full_like(u, -clamp), u))
    y = a * torch.sigmoid(a) * u
    if wt is not None:
        y = y * (wt * (rsf if rsf is not None else 1.0)).unsqueeze(1)
    y.backward(dy.double())
    return x.grad, (wt.grad if wt is not None else None)


@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
@pytest.mark.parametrize("weights", [None, 1.0, 2.5])
def test_reference_is_the_gradient_of_the_forward(seed, clamp, weights):
    x = torch.randn(64, 2 * 192) * 3
    dy = torch.randn(64, 192)
    w = torch.rand(64) if weights is not None else None
    rsf = weights if weights not in (None, 1.0) else None
    out = ref.swiglu_backward(x, dy, None, w, rsf, clamp)
    gx, gw = _autograd_grads(x, dy, w, rsf, clamp)
    torch.testing.assert_close(out[0].double(), gx, rtol=1e-5, atol=1e-5)
    if w is not None:
        torch.testing.assert_close(out[1].double(), gw, rtol=1e-4, atol=1e-4)
    fwd = ref.swiglu_forward(x, None, w, rsf, clamp)
    torch.testing.assert_close(out[-1], fwd, rtol=1e-6, atol=1e-6)


def test_reference_zeroes_padding_rows_with_positive_zero():
    # Padding rows hold negative and non-finite values: every output there must be +0 (all bits 0).
    psum = torch.tensor([3, 20], dtype=torch.int32)  # alignment 16: rows [3, 16) and [20, 24) are padding
    x = torch.full((24, 128), -2.0)
    x[5, 3] = float("inf")
    x[6, 70] = float("nan")
    dy = torch.full((24, 64), -1.0)
    dy[7, 0] = float("inf")
    w = torch.full((24,), 0.5)
    grad, wg, out = ref.swiglu_backward(x, dy, psum, w, 2.5, None, alignment=16)
    pad = ~ref.get_mapping_from_psum(x, psum, 16)
    assert pad.sum() == 17
    assert (grad[pad].view(torch.int32) == 0).all()
    assert (out[pad].view(torch.int32) == 0).all()
    assert (wg[pad].view(torch.int32) == 0).all()
    assert (grad[~pad] != 0).all()


def test_reference_handles_zero_rows():
    grad, wg, out = ref.swiglu_backward(torch.zeros(0, 128), torch.zeros(0, 64), None, torch.zeros(0), 2.5)
    assert grad.shape == (0, 128) and wg.shape == (0,) and out.shape == (0, 64)


def test_clamped_inputs_get_zero_gradient():
    x = torch.tensor([[11.0, -3.0, 12.0, -12.0]])  # HID = 2: gate (11, -3), up (12, -12)
    grad, _ = ref.swiglu_backward(x, torch.ones(1, 2), clamp_value=10.0)
    assert grad[0, 0] == 0 and grad[0, 1] != 0 and grad[0, 2] == 0 and grad[0, 3] == 0


@pytest.mark.parametrize("hidden", [64, 512, 576, 2048])
def test_weight_grad_order_is_the_kernel_lane_order(seed, hidden):
    """_lane_order_row_sum against a scalar transcription of the kernel's loop and butterfly."""
    p = torch.randn(3, hidden) * torch.exp2(torch.randint(-20, 20, (3, hidden)).float())
    got = ref._lane_order_row_sum(p)
    for r in range(3):
        lanes = [torch.tensor(0.0) for _ in range(32)]
        for k in range(-(-hidden // 512)):
            for lane in range(32):
                for i in range(16):
                    c = 512 * k + 16 * lane + i
                    if c < hidden:
                        lanes[lane] = lanes[lane] + p[r, c]
        for off in (16, 8, 4, 2, 1):
            lanes = [lanes[la] + lanes[la ^ off] for la in range(32)]
        assert got[r].view(torch.int32) == lanes[0].view(torch.int32)
    torch.testing.assert_close(got.double(), p.double().sum(1), rtol=1e-4, atol=1e-30 + 1e-5 * p.abs().max())


def test_fake_implementations_give_shapes_and_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(2, 3, 512, dtype=torch.float8_e4m3fn, device="cuda")
        sf = torch.empty(6, 16, device="cuda")
        dy = torch.empty(6, 256, dtype=torch.float32, device="cuda")
        xg, q, s, wg, ao = torch.ops.kernelkiln.swiglu_backward_and_per_token_cast(
            x, sf, dy, "e4m3", 32, None, torch.empty(6, device="cuda"), 2.5, False, True, True, None, True)
        assert xg.shape == (6, 512) and xg.dtype == torch.bfloat16
        assert q.shape == (6, 512) and q.dtype == torch.float8_e4m3fn
        assert s.shape == (6, 4) and s.dtype == torch.int32
        assert wg.shape == (6,) and ao.shape == (6, 256) and ao.dtype == torch.bfloat16
        xg, wg, ao = torch.ops.kernelkiln.swiglu_backward(torch.empty(5, 256, device="cuda"),
                                                        torch.empty(5, 128, device="cuda"), "bf16", None, None,
                                                        None, 1.0, False)
        assert xg.shape == (5, 256) and xg.dtype == torch.bfloat16 and wg.numel() == 0 and ao.numel() == 0
        q, s = torch.ops.kernelkiln.swiglu_forward_and_per_token_cast(
            torch.empty(5, 256, dtype=torch.bfloat16, device="cuda"), "e4m3", 128, None, None, None, False, False,
            False, None, None)
        assert q.shape == (5, 128) and s.shape == (5, 1) and s.dtype == torch.float32
        y = torch.ops.kernelkiln.swiglu_forward(torch.empty(5, 256, device="cuda"), "fp32", None, None, None, None,
                                              None)
        assert y.shape == (5, 128) and y.dtype == torch.float32
