"""Side-by-side cases of ``quant``: every public function of the peer's 2.1.0 ``tile_kernels.quant`` (all of them
exist in kernelkiln.quant), on DeepSeek-V3/V4 shapes (T = 16384 tokens, hidden 7168, MoE intermediate 2048, so the
SwiGLU input is 2 x 2048 wide; 128 x 128 weight blocks, 1 x 128 e4m3 and 1 x 32 e2m1 activation blocks) and
Qwen3-MoE's hidden 4096.

Not covered: the stochastic-rounding variants (``cast(..., stochastic_rounding=True)``,
``per_token_cast(..., stochastic_cast=True)``): the peer lowers them to PTX ``cvt.rs``, which needs sm_100a, so it
cannot compile them on the H200 the comparison runs on. Their rounding bits are a hash of the data (no seed), so they
would need no ``Calls.seed``.

Inputs that are already quantized (cast_back, swiglu backward, the lossless cast, ...) are made here with plain torch
ops, not with either package, so both sides read the same bytes.
"""
from functools import partial

import torch

from .common import Calls, Case

H, H_QWEN, INTER = 7168, 4096, 2048  # DeepSeek hidden, Qwen3-MoE hidden, DeepSeek MoE intermediate
EXPERTS = 32  # local experts of one EP rank (256 over 8 ranks) for the SwiGLU layouts
# DeepGEMM's scale layout: UE8M0 powers of two, four per int32, TMA-aligned column-major
UE8M0_COL = {"round_sf": True, "use_packed_ue8m0": True, "use_tma_aligned_col_major_sf": True}


def _case(name, build, **params):
    """A case whose params are exactly its builder's keyword arguments."""
    return Case(name, params, partial(build, **params))


def _bf16(device, *shape):
    return torch.randn(*shape, device=device).to(torch.bfloat16)


def _e4m3(device, *shape):
    return torch.randn(*shape, device=device).to(torch.float8_e4m3fn)  # |x| << 448: no saturation, no NaN codes


def _e2m1(device, t, h):
    """Packed e2m1 pairs, every one of the 256 byte values (e2m1 has no NaN code)."""
    return torch.randint(-128, 128, (t, h // 2), dtype=torch.int16, device=device).to(torch.int8)


def _scales(device, *shape):
    """Positive fp32 scales that are not powers of two, so the multiplications round."""
    return torch.rand(*shape, device=device) * 0.01 + 1e-3


def _ue8m0(device, t, groups):
    """Packed UE8M0 scales: exponent bytes around 2^0, four per int32 (``groups`` must be a multiple of 4)."""
    return torch.randint(117, 137, (t, groups), dtype=torch.uint8, device=device).view(torch.int32)


def _psum(device, t, experts):
    """Prefix sums of ``experts`` equal segments of multiples of 128 rows (the peer's token alignment): no padding
    rows, which the forward kernels leave unwritten (their garbage would differ between the two packages)."""
    return torch.arange(1, experts + 1, dtype=torch.int32, device=device) * (t // experts)


# ---- per-token, per-block and per-channel casts ----

def _per_token_cast(device, T, H, fmt, g, **opts):
    x = _bf16(device, T, H)
    return Calls(lambda m: m.quant.per_token_cast(x, fmt, g, **opts))


def _per_token_requant(device, T, H, x_block, fmt, g):
    x = (_e4m3(device, T, H), _scales(device, T // x_block[0], H // x_block[1]))
    return Calls(lambda m: m.quant.per_token_cast(x, fmt, g, x_block_size=tuple(x_block)))


def _per_token_sf_only(device, T, H, fmt, g):
    x = _bf16(device, T, H)
    return Calls(lambda m: m.quant.per_token_cast_with_sf_only(x, fmt, g))


def _per_token_precomputed(device, T, H, fmt, g):
    x = _bf16(device, T, H)
    sf = x.float().view(T, H // g, g).abs().amax(-1).clamp_min(1e-4) / 448  # the scales a cast would pick
    return Calls(lambda m: m.quant.per_token_cast_with_precomputed_sf(x, fmt, g, sf))


def _per_block_cast(device, T, H, fmt, block, **opts):
    x = _bf16(device, T, H)
    return Calls(lambda m: m.quant.per_block_cast(x, fmt, tuple(block), **opts))


def _per_block_sf_only(device, T, H, fmt, block):
    x = _bf16(device, T, H)
    return Calls(lambda m: m.quant.per_block_cast_with_sf_only(x, fmt, tuple(block)))


def _per_block_precomputed(device, T, H, fmt, block):
    x = _bf16(device, T, H)
    bm, bk = block
    amax = x.float().view(T // bm, bm, H // bk, bk).abs().amax(dim=(1, 3))
    sf = amax.clamp_min(1e-4) / 448
    return Calls(lambda m: m.quant.per_block_cast_with_precomputed_sf(x, fmt, tuple(block), sf))


def _lossless(device, T, H, out_block, **opts):
    """MXFP4 (1 x 32, packed UE8M0) -> e4m3: the scale exponents of a 128-row group span 10 binades around a random
    level, so every output block stays exact (the kernel needs max/min <= 2^11 per block)."""
    level = torch.randint(-100, 100, (T // 128, 1), device=device).repeat_interleave(128, 0)
    e = level + torch.randint(0, 11, (T, H // 32), device=device)
    x = (_e2m1(device, T, H), (e + 127).to(torch.uint8).view(torch.int32))
    return Calls(lambda m: m.quant.per_block_cast_lossless(x, "e4m3", (1, 32), tuple(out_block), **opts))


def _per_channel_cast(device, T, H, fmt, gm):
    x = _bf16(device, T, H)
    return Calls(lambda m: m.quant.per_channel_cast(x, fmt, gm))


def _cast(device, T, H, src, dst):
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    x = torch.randn(T, H, device=device, dtype=dtypes[src])
    return Calls(lambda m: m.quant.cast(x, dtypes[dst]))


# ---- dequantization and fake quantization ----

def _cast_back(device, T, H, fmt, block, sf):
    if fmt == "e4m3":
        data = _e4m3(device, T, H)
    else:
        data = _e2m1(device, T, H)
    groups = (T // block[0], H // block[1])
    x = (data, _ue8m0(device, *groups) if sf == "ue8m0" else _scales(device, *groups))
    return Calls(lambda m: m.quant.cast_back(x, "bf16", tuple(block)))


def _per_token_cast_back(device, T, H, fmt, g):
    x = (_e4m3(device, T, H), _scales(device, T, H // g))
    return Calls(lambda m: m.quant.per_token_cast_back(x, "bf16", g))


def _fake_quant(device, T, H, fmt, g):
    x0 = _bf16(device, T, H)
    x = x0.clone()  # the timed replays quantize this buffer in place, again and again

    def once(m):  # one pass over a fresh copy, returned because the op returns nothing
        y = x0.clone()
        m.quant.per_token_cast_and_cast_back(y, fmt, g)
        return y

    return Calls(lambda m: m.quant.per_token_cast_and_cast_back(x, fmt, g), once)


# ---- SwiGLU (MoE expert activations; T expanded tokens of 2 x INTER) ----

def _swiglu_inputs(device, T, experts):
    psum = _psum(device, T, experts) if experts else None
    return psum, torch.rand(T, device=device)


def _swiglu_fwd_cast(device, T, inter, experts, g, clamp=None, **opts):
    x = _bf16(device, T, 2 * inter)
    psum, w = _swiglu_inputs(device, T, experts)
    if clamp is None:
        return Calls(lambda m: m.quant.swiglu_forward_and_per_token_cast(x, "e4m3", g, psum, w, 2.5, **opts))
    counts = torch.zeros(4, dtype=torch.int64, device=device)  # accumulated in place by every replay

    def once(m):  # fresh zero counters; they are an output of the op, so they are compared too
        fresh = torch.zeros_like(counts)
        out = m.quant.swiglu_forward_and_per_token_cast(x, "e4m3", g, psum, w, 2.5, clamp_value=clamp,
                                                        clamped_count=fresh, **opts)
        return out, fresh

    return Calls(lambda m: m.quant.swiglu_forward_and_per_token_cast(x, "e4m3", g, psum, w, 2.5, clamp_value=clamp,
                                                                     clamped_count=counts, **opts), once)


def _swiglu_fwd(device, T, inter, experts, fmt):
    x = _bf16(device, T, 2 * inter)
    psum, w = _swiglu_inputs(device, T, experts)
    return Calls(lambda m: m.quant.swiglu_forward(x, fmt, psum, w, 2.5))


def _swiglu_bwd_cast(device, T, inter, experts, g, do_recompute):
    x = (_e4m3(device, T, 2 * inter), _scales(device, T, 2 * inter // g))
    dy = _bf16(device, T, inter)
    psum, w = _swiglu_inputs(device, T, experts)
    return Calls(lambda m: m.quant.swiglu_backward_and_per_token_cast(x, dy, "e4m3", g, psum, w, 2.5,
                                                                      do_recompute=do_recompute))


def _swiglu_bwd(device, T, inter, experts, fmt):
    x, dy = _bf16(device, T, 2 * inter), _bf16(device, T, inter)
    psum, w = _swiglu_inputs(device, T, experts)
    return Calls(lambda m: m.quant.swiglu_backward(x, dy, fmt, psum, w, 2.5))


# ---- RMSNorm ----

def _norm_inputs(device, T, H):
    return _bf16(device, T, H), _bf16(device, T, H), (1 + 0.1 * torch.randn(H, device=device)).to(torch.bfloat16)


def _norm_fwd(device, T, H):
    x, r, w = _norm_inputs(device, T, H)
    return Calls(lambda m: m.quant.norm_forward(x, w, 1e-6, residual=r, with_rstd=True))


def _norm_fwd_cast(device, T, H, fmt, g, **opts):
    x, r, w = _norm_inputs(device, T, H)
    return Calls(lambda m: m.quant.norm_forward_and_per_token_cast(x, w, 1e-6, fmt, g, residual=r, with_out_bf16=True,
                                                                   with_rstd=True, **opts))


def _norm_bwd(device, T, H):
    x, dy, w = _norm_inputs(device, T, H)
    rstd = torch.rand(T, device=device) + 0.5
    wg0 = torch.randn(H, device=device)
    wg = wg0.clone()  # the weight gradient every replay accumulates into

    # The peer's weight gradient is deterministic (fixed-order per-SM partials), so the comparison stays bitwise;
    # a different partial count on our side would show here as a last-bit difference.
    return Calls(lambda m: m.quant.norm_backward(dy, x, w, rstd, weight_grad=wg),
                 lambda m: m.quant.norm_backward(dy, x, w, rstd, weight_grad=wg0.clone()))


# ---- host-side layouts and helpers ----

def _weight_sf(device, E, weights, block_size):
    """fp32 power-of-two 128 x 128 scales of one MoE layer's expert weights: gate/up [2I, H] and down [H, I]."""
    sf = [torch.exp2(torch.randint(-20, 0, (E, n // block_size, k // block_size), device=device).float())
          for n, k in weights]
    return Calls(lambda m: m.quant.batched_transpose_weight_sf(sf, block_size, [False, True], [None, None]))


def _unpack_e2m1(device, T, H):
    x = _e2m1(device, T, H)
    return Calls(lambda m: m.quant.unpack_from_e2m1fn_x2(x))


def cases(quick=False):
    t = 256 if quick else 16384
    experts = min(EXPERTS, t // 128)
    yield _case("quant.per_token_cast", _per_token_cast, T=t, H=H, fmt="e4m3", g=128)
    yield _case("quant.per_token_cast", _per_token_cast, T=t, H=H, fmt="e4m3", g=128, **UE8M0_COL)
    yield _case("quant.per_token_cast", _per_token_cast, T=t, H=H, fmt="e2m1", g=32)
    yield _case("quant.per_token_cast", _per_token_cast, T=t, H=H, fmt="e2m1", g=32, **UE8M0_COL)
    yield _case("quant.per_token_cast", _per_token_cast, T=t, H=H_QWEN, fmt="e4m3", g=128)
    # FP8 128 x 128 blocks re-quantized to 1 x 128 rows (dequantized on the fly)
    yield _case("quant.per_token_cast", _per_token_requant, T=t, H=H, x_block=(128, 128), fmt="e4m3", g=128)
    yield _case("quant.per_token_cast_with_sf_only", _per_token_sf_only, T=t, H=H, fmt="e4m3", g=128)
    yield _case("quant.per_token_cast_with_precomputed_sf", _per_token_precomputed, T=t, H=H, fmt="e4m3", g=128)
    yield _case("quant.per_block_cast", _per_block_cast, T=t, H=H, fmt="e4m3", block=(128, 128))
    yield _case("quant.per_block_cast", _per_block_cast, T=t, H=H, fmt="e4m3", block=(32, 32),
                round_sf=True, use_packed_ue8m0=True)
    yield _case("quant.per_block_cast_with_sf_only", _per_block_sf_only, T=t, H=H, fmt="e4m3", block=(128, 128))
    yield _case("quant.per_block_cast_with_precomputed_sf", _per_block_precomputed, T=t, H=H, fmt="e4m3",
                block=(128, 128))
    yield _case("quant.per_block_cast_lossless", _lossless, T=t, H=H, out_block=(128, 128), **UE8M0_COL)
    yield _case("quant.per_channel_cast", _per_channel_cast, T=t, H=H, fmt="e4m3", gm=128)
    yield _case("quant.cast", _cast, T=t, H=H, src="fp32", dst="bf16")
    yield _case("quant.cast_back", _cast_back, T=t, H=H, fmt="e4m3", block=(128, 128), sf="fp32")
    yield _case("quant.cast_back", _cast_back, T=t, H=H, fmt="e2m1", block=(1, 32), sf="ue8m0")
    yield _case("quant.per_token_cast_back", _per_token_cast_back, T=t, H=H, fmt="e4m3", g=128)
    yield _case("quant.per_token_cast_and_cast_back", _fake_quant, T=t, H=H, fmt="e4m3", g=128)
    yield _case("quant.swiglu_forward_and_per_token_cast", _swiglu_fwd_cast, T=t, inter=INTER, experts=experts, g=128)
    yield _case("quant.swiglu_forward_and_per_token_cast", _swiglu_fwd_cast, T=t, inter=INTER, experts=0, g=32,
                clamp=10.0, round_sf=True)
    yield _case("quant.swiglu_forward", _swiglu_fwd, T=t, inter=INTER, experts=experts, fmt="bf16")
    yield _case("quant.swiglu_backward_and_per_token_cast", _swiglu_bwd_cast, T=t, inter=INTER, experts=experts, g=128,
                do_recompute=True)
    yield _case("quant.swiglu_backward", _swiglu_bwd, T=t, inter=INTER, experts=experts, fmt="bf16")
    yield _case("quant.norm_forward", _norm_fwd, T=t, H=H)
    yield _case("quant.norm_forward_and_per_token_cast", _norm_fwd_cast, T=t, H=H, fmt="e4m3", g=32,
                round_sf=True, use_packed_ue8m0=True)
    yield _case("quant.norm_backward", _norm_bwd, T=t, H=H)
    yield _case("quant.batched_transpose_weight_sf", _weight_sf, E=256, weights=[[2 * INTER, H], [H, INTER]],
                block_size=128)
    # a host-side torch decoder in the peer (debugging); smaller T, as its temporaries are several times the output
    yield _case("quant.unpack_from_e2m1fn_x2", _unpack_e2m1, T=t // 2, H=H)
