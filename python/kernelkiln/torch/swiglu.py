"""PyTorch references of the fused SwiGLU ops (tile_kernels 2.1 names; docs/SPEC.md §3.2, §4 item 11).

The fp32 operation order is the definition the kernels mirror, one IEEE
rounding per step (no fused multiply-add):

    a = gate, u = up                       (fp32; clamp: a <= c, -c <= u <= c)
    e = exp(-a); d = 1 + e; s = a / d; y = s * u; y = y * w_eff,  w_eff = w * rsf

On CUDA, torch's elementwise kernels round each step like this and use the same
``expf``, so the kernel output is bit-identical; on CPU ``exp`` may differ in the
last bit. Rows outside every expert's range [align(psum[e-1], A), psum[e]) are
padding (``get_mapping_from_psum``).
"""
import torch

__all__ = [  # this module's references (kernelkiln.torch re-exports them)
    "get_mapping_from_psum",
    "swiglu_backward",
    "swiglu_forward",
]


def _alignment(alignment):
    if alignment is not None:
        return int(alignment)
    from kernelkiln import config  # pure Python, no kernels or toolchain
    return config.get_token_alignment()


def get_mapping_from_psum(x, psum_num_tokens_per_expert, alignment=None):
    """Bool mask [N] of the valid (non-padding) rows of the expert-major layout of ``x`` [N, ...]."""
    n = x.shape[0]
    a = _alignment(alignment)
    mask = torch.zeros(n, dtype=torch.bool, device=x.device)
    ends = [int(v) for v in psum_num_tokens_per_expert.cpu().tolist()]
    for begin, end in zip([0] + ends, ends):
        start = -(-begin // a) * a
        if end > start:
            mask[start:end] = True
    return mask


def _split(x):
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] % 2:
        raise ValueError("x must be a 2-D tensor [N, 2I]")
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"x dtype must be torch.bfloat16 or torch.float32, got {x.dtype}")
    i = x.shape[1] // 2
    x32 = x.float()
    return x32[:, :i], x32[:, i:]


def _effective_weights(topk_weights, routed_scaling_factor):
    if topk_weights is None:
        if routed_scaling_factor is not None:
            raise ValueError("routed_scaling_factor requires topk_weights")
        return None
    w = topk_weights.float()
    if routed_scaling_factor is not None:
        w = w * torch.full_like(w, float(routed_scaling_factor))
    return w


def swiglu_forward(x, psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                   clamp_value=None, clamped_count=None, alignment=None):
    """fp32 ``silu(min(g, c)) * clamp(u, -c, c) * (w * rsf)`` for every row (padding rows included).

    clamped_count (int64 [4], optional, needs clamp_value) is incremented in place over the
    valid rows: [0] gate > c, [1] up > c, [2] up < -c, [3] valid rows x I.
    """
    a, u = _split(x)
    n, hidden = a.shape
    if clamp_value is not None:
        c = float(clamp_value)
        if clamped_count is not None:
            mask = (get_mapping_from_psum(x, psum_num_tokens_per_expert, alignment)
                    if psum_num_tokens_per_expert is not None else torch.ones(n, dtype=torch.bool, device=x.device))
            counts = torch.stack([(a > c)[mask].sum(), (u > c)[mask].sum(), (u < -c)[mask].sum(),
                                  mask.sum() * hidden])
            clamped_count += counts.to(clamped_count.device, torch.int64)
        # where, not clamp_min/max: NaN stays NaN, exactly as the kernel's selects
        a = torch.where(a > c, torch.full_like(a, c), a)
        u = torch.where(u > c, torch.full_like(u, c), torch.where(u < -c, torch.full_like(u, -c), u))
    elif clamped_count is not None:
        raise ValueError("clamped_count requires clamp_value")
    one = torch.ones_like(a)
    y = a / (one + torch.exp(-a)) * u
    w = _effective_weights(topk_weights, routed_scaling_factor)
    if w is not None:
        y = y * w.unsqueeze(1)
    return y


# weight_grad's fixed fp32 summation order (kernels/quant/swiglu_backward.py): the row is
# walked in chunks of LANES * LANE_COLS columns; lane l sums its columns 512k + 16l + i in
# increasing order from 0.0, then a butterfly (xor 16, 8, 4, 2, 1) adds the 32 lane sums.
LANES, LANE_COLS = 32, 16


def _lane_order_row_sum(p):
    """Sum of p [N, I] over dim 1 in the kernel's order (bit-exact, unlike torch.sum)."""
    n, hidden = p.shape
    chunk = LANES * LANE_COLS
    chunks = -(-hidden // chunk)
    padded = torch.zeros(n, chunks * chunk, dtype=torch.float32, device=p.device)
    padded[:, :hidden] = p
    mask = torch.zeros(chunks * chunk, dtype=torch.bool, device=p.device)
    mask[:hidden] = True
    # [N, chunks, lanes, cols] -> [N, lanes, chunks * cols]: each lane's columns in increasing order.
    per_lane = padded.view(n, chunks, LANES, LANE_COLS).permute(0, 2, 1, 3).reshape(n, LANES, chunks * LANE_COLS)
    lane_mask = mask.view(chunks, LANES, LANE_COLS).permute(1, 0, 2).reshape(LANES, chunks * LANE_COLS)
    acc = torch.zeros(n, LANES, dtype=torch.float32, device=p.device)
    for j in range(per_lane.shape[2]):
        acc = torch.where(lane_mask[:, j], acc + per_lane[:, :, j], acc)
    lanes = torch.arange(LANES, device=p.device)
    for off in (16, 8, 4, 2, 1):
        acc = acc + acc[:, lanes ^ off]
    return acc[:, 0]


def swiglu_backward(x, grad_out, psum_num_tokens_per_expert=None, topk_weights=None, routed_scaling_factor=None,
                    clamp_value=None, alignment=None):
    """Backward of ``swiglu_forward`` (fp32); every output of a padding row is +0.

    Returns ``(x_grad [N, 2I], weight_grad [N], out [N, I])`` with topk_weights, else
    ``(x_grad, out)``; ``out`` is the recomputed weighted forward output. With
    w_eff = w * rsf (1 without weights), d = 1 + exp(-a) and s = 1 / d (a, u clamped):
    dgate = ((dy * w_eff) * s * u) * (a * (1 - s) + 1), dup = ((dy * w_eff) * s) * a,
    each zeroed where that input was clamped; out = ((a / d) * u) * w_eff;
    weight_grad = sum(dy * ((a / d) * u)) (* rsf), summed in the kernel's fixed order
    (``_lane_order_row_sum``). For FP8 input pass the dequantized fp32 x (q * sf).
    """
    a, u = _split(x)
    n, hidden = a.shape
    dy = grad_out.float().reshape(n, hidden)
    valid = (get_mapping_from_psum(x, psum_num_tokens_per_expert, alignment)
             if psum_num_tokens_per_expert is not None else torch.ones(n, dtype=torch.bool, device=x.device))
    gate_clamped = up_clamped = None
    if clamp_value is not None:
        c = float(clamp_value)
        gate_clamped, up_clamped = a > c, (u > c) | (u < -c)
        a = torch.where(a > c, torch.full_like(a, c), a)
        u = torch.where(u > c, torch.full_like(u, c), torch.where(u < -c, torch.full_like(u, -c), u))
    one = torch.ones_like(a)
    d = one + torch.exp(-a)
    s = one / d
    w = _effective_weights(topk_weights, routed_scaling_factor)
    w_rows = w if w is not None else torch.ones(n, device=x.device)
    g_ws = dy * w_rows.unsqueeze(1) * s
    x_grad = g_ws * u * (a * (one - s) + one)
    y_grad = g_ws * a
    if gate_clamped is not None:
        x_grad = x_grad.masked_fill(gate_clamped, 0.0)
        y_grad = y_grad.masked_fill(up_clamped, 0.0)
    act = a / d * u
    out = act * w_rows.unsqueeze(1)
    rows = valid.unsqueeze(1)
    # Explicit zeros (not a zero weight): +0 even where dy or x of a padding row is negative or not finite.
    grad = torch.where(rows, torch.cat([x_grad, y_grad], dim=1), torch.zeros(n, 2 * hidden, device=x.device))
    out = torch.where(rows, out, torch.zeros_like(out))
    if w is None:
        return grad, out
    wg = _lane_order_row_sum(dy * act)
    if routed_scaling_factor is not None:
        wg = wg * torch.full_like(wg, float(routed_scaling_factor))
    wg = torch.where(valid, wg, torch.zeros_like(wg))
    return grad, wg, out
