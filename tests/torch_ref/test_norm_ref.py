"""CPU tests of the RMSNorm references (kernelkiln.torch.norm): accuracy against float64 and the
documented fixed summation orders, emulated element by element."""
import pytest
import torch

from kernelkiln.torch import norm_backward_ref, norm_forward_ref
from kernelkiln.torch import norm as ref


def _x(t, h, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(t, h, generator=g) * torch.exp2(torch.randint(-6, 6, (t, 1), generator=g).float())).to(dtype)


def _naive_row_sum(row, threads, vec):
    """The kernel order written out with scalar fp32 adds: per thread, butterfly, warps."""
    f = torch.float32
    h = row.numel()
    acc = [torch.zeros((), dtype=f) for _ in range(threads)]
    for tx in range(threads):
        for c in range(ref.MAXC):
            for i in range(vec):
                col = (c * threads + tx) * vec + i
                if col < h:
                    acc[tx] = acc[tx] + row[col]
    for off in (16, 8, 4, 2, 1):
        acc = [acc[lane] + acc[(lane // 32) * 32 + ((lane % 32) ^ off)] for lane in range(threads)]
    total = acc[0]
    for w in range(1, threads // 32):
        total = total + acc[w * 32]
    return total


@pytest.mark.parametrize("dtype,h", [(torch.bfloat16, 1552), (torch.float32, 528)])
def test_row_sum_is_the_documented_order(dtype, h):
    terms = torch.randn(1, h) * torch.exp2(torch.randint(-20, 20, (1, h)).float())
    got = ref.row_sum(terms, dtype)
    want = _naive_row_sum(terms[0], ref.THREADS[dtype], 16 // torch.empty((), dtype=dtype).element_size())
    assert got.view(torch.int32).item() == want.view(torch.int32).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("h", [16, 128, 7168, 8192])
@pytest.mark.parametrize("residual", [False, True])
def test_forward_close_to_float64(dtype, h, residual):
    x = _x(5, h, dtype)
    r = _x(5, h, dtype, seed=1) if residual else None
    w = (1 + 0.1 * torch.randn(h)).to(dtype)
    out, rstd, norm_input = norm_forward_ref(x, w, 1e-6, residual=r, out_scale=0.5)
    xin = (x.double() + r.double()).to(dtype) if residual else x
    assert torch.equal(norm_input, xin)
    r64 = torch.rsqrt(xin.double().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), r64, rtol=1e-5, atol=0)
    want = xin.double() * r64[:, None] * (w.double() * 0.5)
    torch.testing.assert_close(out.double(), want, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-30)
    assert out.dtype == dtype and rstd.dtype == torch.float32
    if not residual:
        assert norm_input is x


def test_forward_3d_equals_flattened_and_weight_none_equals_ones():
    x = _x(6, 256, torch.bfloat16).view(2, 3, 256)
    out, rstd, _ = norm_forward_ref(x, None, 1e-6)
    out2, rstd2, _ = norm_forward_ref(x.view(6, 256), torch.ones(256, dtype=torch.bfloat16), 1e-6)
    assert out.shape == (2, 3, 256) and rstd.shape == (2, 3)
    assert torch.equal(out.view(6, 256), out2) and torch.equal(rstd.view(6), rstd2)


def test_hidden_too_large_is_rejected():
    with pytest.raises(ValueError, match="exceeds 8192"):
        norm_forward_ref(torch.zeros(1, 8208), None, 1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_rog", [False, True])
def test_backward_close_to_autograd(dtype, with_rog):
    t, h = 37, 512
    x = _x(t, h, dtype)
    w = (1 + 0.1 * torch.randn(h)).to(dtype)
    dy = _x(t, h, dtype, seed=2)
    rog = _x(t, h, dtype, seed=3) if with_rog else None
    _, rstd, _ = norm_forward_ref(x, w, 1e-6)
    dx, dw = norm_backward_ref(dy, x, w, rstd, residual_out_grad=rog, out_scale=2.0, num_partials=7)
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y = x64 * rstd.double()[:, None] * w64 * 2.0  # rstd treated as a constant of the forward...
    xh = x64 * rstd.double()[:, None]
    # ...the exact gradient through rstd is added analytically: -xh * mean(xh * g) * rstd
    (y * dy.double()).sum().backward()
    g = dy.double() * w.double() * 2.0
    dx64 = x64.grad - xh.detach() * (xh.detach() * g).mean(-1, keepdim=True) * rstd.double()[:, None]
    if with_rog:
        dx64 = dx64 + rog.double()
    tol = dict(rtol=2e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dx.double(), dx64, **tol)
    torch.testing.assert_close(dw.double(), w64.grad, rtol=2e-2 if dtype == torch.bfloat16 else 1e-4, atol=1e-3)


def test_backward_weight_grad_partials_order_and_accumulate():
    t, h, p = 45, 64, 6
    x = _x(t, h, torch.float32)
    dy = _x(t, h, torch.float32, seed=4)
    rstd = torch.rand(t) + 0.5
    parts = ref.dw_partials(x, dy, rstd, 1.0, p)
    terms = (x * rstd[:, None]) * dy
    for q in range(p):  # CTA q: rows q, q + P, ... in order from +0
        acc = torch.zeros(h)
        for row in range(q, t, p):
            acc = acc + terms[row]
        assert torch.equal(parts[q], acc)
    per = -(-p // ref.REDUCE_WARPS)
    sums = []
    for wi in range(ref.REDUCE_WARPS):
        s = torch.zeros(h)
        for j in range(wi * per, min(p, (wi + 1) * per)):
            s = s + parts[j]
        sums.append(s)
    total = sums[0]
    for s in sums[1:]:
        total = total + s
    assert torch.equal(ref.reduce_partials(parts), total)
    w = torch.ones(h)
    wg = torch.full((h,), 3.0)
    _, dw = norm_backward_ref(dy, x, w, rstd, weight_grad=wg, num_partials=p)
    assert torch.equal(dw, wg + total) and torch.equal(wg, torch.full((h,), 3.0))
    _, none = norm_backward_ref(dy, x, None, rstd, num_partials=p)
    assert none is None


def test_kernel_layout_constants_match_the_reference():
    from kernels.quant import norm_backward, norm_forward
    names = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
    for dtype, threads in ref.THREADS.items():
        assert norm_forward.THREADS[names[dtype]] == threads == norm_backward.THREADS[names[dtype]]
    assert norm_forward.MAXC == norm_backward.MAXC == ref.MAXC
    assert norm_backward.REDUCE_WARPS == ref.REDUCE_WARPS
