"""The calls the launch recorder makes: every registered op, every format, scale option and layout the runtime
distinguishes, the plan path (a second call with the same sizes) and the general one (out=, odd sizes, views).

Inputs are made on the CPU from seed 0 (their values never reach a kernel here: only their sizes, strides and
addresses do). Each case runs ``calls`` times; a case whose variant is not in the store is reported missing.
"""
from typing import Callable, NamedTuple

import torch

BF16, F32, E4M3 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


class Case(NamedTuple):
    name: str
    inputs: Callable[[], dict]
    run: Callable
    calls: int = 2


def _x(t, h, dtype=BF16):
    return torch.randn(t, h).to(dtype)


CASES = []


def case(name, inputs, calls=2):
    def wrap(run):
        CASES.append(Case(name, inputs, run, calls))
        return run
    return wrap


# --- quant: per_token_cast and its variants ------------------------------------------------------------------
for _fmt, _g in (("e4m3", 128), ("e4m3", 32), ("e2m1", 32), ("e2m1", 16)):
    for _opts in ({}, {"round_sf": True}, {"round_sf": True, "use_packed_ue8m0": True},
                  {"round_sf": True, "use_packed_ue8m0": True, "use_tma_aligned_col_major_sf": True},
                  {"use_tma_aligned_col_major_sf": True}, {"use_e4m3_sf": True}):
        _tag = "-".join(k.replace("use_", "").replace("_sf", "") for k in _opts) or "fp32sf"
        for _dtype, _t, _h in ((BF16, 128, 7168), (F32, 37, 576)):
            case(f"per_token_cast/{_fmt}/{_g}/{_tag}/{_dtype}/{_t}x{_h}",
                 lambda t=_t, h=_h, d=_dtype: {"x": _x(t, h, d)})(
                lambda tk, x, f=_fmt, g=_g, o=_opts: tk.quant.per_token_cast(x, f, g, **o))

case("per_token_cast/e4m3/out=", lambda: {"x": _x(33, 1024), "q": torch.empty(33, 1024, dtype=E4M3),
                                          "sf": torch.empty(33, 8)})(
    lambda tk, x, q, sf: tk.quant.per_token_cast(x, "e4m3", 128, out=(q, sf)))
case("per_token_cast/e4m3/strided-view", lambda: {"x": _x(64, 2048)[5:50, :1024]})(
    lambda tk, x: tk.quant.per_token_cast(x, "e4m3", 128))
case("per_token_cast/e4m3/empty", lambda: {"x": _x(0, 1024)})(
    lambda tk, x: tk.quant.per_token_cast(x, "e4m3", 128))
case("per_token_cast/e4m3/stochastic", lambda: {"x": _x(96, 1024)})(
    lambda tk, x: tk.quant.per_token_cast(x, "e4m3", 128, stochastic_cast=True))
case("per_token_cast/requant/e4m3-128x128->e2m1", lambda: {
    "d": _x(256, 1024).to(E4M3), "s": torch.rand(2, 8) + 0.5})(
    lambda tk, d, s: tk.quant.per_token_cast((d, s), "e2m1", 32, x_block_size=(128, 128)))
case("per_token_cast/requant/e4m3-1x128->e4m3-ue8m0", lambda: {
    "d": _x(100, 1024).to(E4M3), "s": torch.rand(100, 8) + 0.5})(
    lambda tk, d, s: tk.quant.per_token_cast((d, s), "e4m3", 128, x_block_size=(1, 128), round_sf=True,
                                             use_packed_ue8m0=True))
case("per_token_cast_with_sf_only/e4m3", lambda: {"x": _x(128, 7168)})(
    lambda tk, x: tk.quant.per_token_cast_with_sf_only(x, "e4m3", 128))
case("per_token_cast_with_sf_only/e2m1/ue8m0-col", lambda: {"x": _x(77, 2048)})(
    lambda tk, x: tk.quant.per_token_cast_with_sf_only(x, "e2m1", 32, use_tma_aligned_col_major_sf=True,
                                                       round_sf=True, use_packed_ue8m0=True))
case("per_token_cast_with_precomputed_sf/e4m3", lambda: {"x": _x(64, 1024), "sf": torch.rand(64, 8) + 0.1})(
    lambda tk, x, sf: tk.quant.per_token_cast_with_precomputed_sf(x, "e4m3", 128, sf))
case("per_token_cast_to_e5m6", lambda: {"x": _x(50, 1024)})(
    lambda tk, x: tk.quant.per_token_cast_to_e5m6(x, 1024))
case("per_token_cast_to_e5m6/ue8m0-col", lambda: {"x": _x(50, 1024)})(
    lambda tk, x: tk.quant.per_token_cast_to_e5m6(x, 1024, use_tma_aligned_col_major_sf=True, round_sf=True,
                                                  use_packed_ue8m0=True))


# --- quant: per-block, per-channel, cast, cast_back ----------------------------------------------------------
for _fmt in ("e4m3", "e2m1"):
    for _opts in ({}, {"round_sf": True, "use_packed_ue8m0": True, "use_tma_aligned_col_major_sf": True}):
        _tag = "ue8m0-col" if _opts else "fp32sf"
        case(f"per_block_cast/{_fmt}/128x128/{_tag}", lambda: {"x": _x(300, 1024)})(
            lambda tk, x, f=_fmt, o=_opts: tk.quant.per_block_cast(x, f, (128, 128), **o))
case("per_block_cast/e4m3/32x32/f32", lambda: {"x": _x(96, 256, F32)})(
    lambda tk, x: tk.quant.per_block_cast(x, "e4m3", (32, 32)))
case("per_block_cast_with_sf_only/e4m3", lambda: {"x": _x(256, 1024)})(
    lambda tk, x: tk.quant.per_block_cast_with_sf_only(x, "e4m3", (128, 128)))
case("per_block_cast_with_precomputed_sf/e4m3", lambda: {"x": _x(256, 1024), "sf": torch.rand(2, 8) + 0.1})(
    lambda tk, x, sf: tk.quant.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), sf))
case("per_block_cast_lossless/e2m1->e4m3", lambda: {"d": torch.randint(-128, 127, (256, 512), dtype=torch.int8),
                                                   "s": torch.ones(256, 32)})(
    lambda tk, d, s: tk.quant.per_block_cast_lossless((d, s), "e4m3", (1, 32), (128, 128)))
for _opts in ({}, {"round_sf": True, "use_packed_ue8m0": True}):
    case(f"per_channel_cast/e4m3/{'ue8m0' if _opts else 'fp32sf'}", lambda: {"x": _x(256, 1024)})(
        lambda tk, x, o=_opts: tk.quant.per_channel_cast(x, "e4m3", 128, **o))
case("per_channel_cast/e4m3/fp8-input", lambda: {"d": _x(256, 1024).to(E4M3), "s": torch.ones(256, 32)})(
    lambda tk, d, s: tk.quant.per_channel_cast((d, s), "e4m3", 128, num_per_channels=32))
case("per_channel_cast_and_transpose/e4m3", lambda: {"x": _x(256, 512)})(
    lambda tk, x: tk.quant.per_channel_cast_and_transpose(x, "e4m3", 128))
case("per_channel_cast_fused/e4m3", lambda: {"x": _x(256, 512)})(
    lambda tk, x: tk.quant.per_channel_cast_fused(x, "e4m3", 128))
case("per_channel_cast_fused/e4m3/pos_to_token", lambda: {
    "x": _x(100, 512), "p": torch.randint(-1, 100, (256,), dtype=torch.int32)})(
    lambda tk, x, p: tk.quant.per_channel_cast_fused(x, "e4m3", 128, pos_to_token=p))
for _dst in (BF16, F32, E4M3):
    case(f"cast/{_dst}", lambda d=_dst: {"x": _x(130, 1024, F32 if d is BF16 else BF16)})(
        lambda tk, x, d=_dst: tk.quant.cast(x, d))
case("cast/bf16/stochastic", lambda: {"x": _x(130, 1024, F32)})(
    lambda tk, x: tk.quant.cast(x, BF16, stochastic_rounding=True))
for _fmt, _bs in (("e4m3", (1, 128)), ("e4m3", (128, 128)), ("e2m1", (1, 32))):
    case(f"cast_back/{_fmt}/{_bs[0]}x{_bs[1]}", lambda f=_fmt, bs=_bs: {
        "d": (_x(256, 1024).to(E4M3) if f == "e4m3" else torch.randint(-128, 127, (256, 512), dtype=torch.int8)),
        "s": torch.rand(-(-256 // bs[0]), 1024 // bs[1]) + 0.1})(
        lambda tk, d, s, bs=_bs: tk.quant.cast_back((d, s), "bf16", bs))
case("per_token_cast_back/e4m3", lambda: {"d": _x(64, 1024).to(E4M3), "s": torch.rand(64, 8) + 0.1})(
    lambda tk, d, s: tk.quant.per_token_cast_back((d, s), "bf16", 128))
case("per_token_cast_and_cast_back/e4m3", lambda: {"x": _x(64, 1024)})(
    lambda tk, x: tk.quant.per_token_cast_and_cast_back(x, "e4m3", 128))
case("cast_back_e5m6", lambda: {"d": torch.randint(0, 255, (50, 3 * 1024 // 2), dtype=torch.uint8),
                                "s": torch.rand(50, 1) + 0.1})(
    lambda tk, d, s: tk.quant.cast_back_e5m6((d, s), "bf16", (1, 1024)))
def _weight_sfs():
    # both weights' scales in one allocation, a first: the op addresses them from the lowest one
    buf = torch.exp2(torch.randint(-4, 4, (16 * 8 + 8 * 24,)).float())
    return {"a": buf[:128].view(16, 8), "b": buf[128:].view(8, 24)}


case("batched_transpose_weight_sf", _weight_sfs)(
    lambda tk, a, b: tk.quant.batched_transpose_weight_sf([a, b], 128, [False, True], [None, None]))


# --- quant: swiglu and norm ----------------------------------------------------------------------------------
def _psum():
    return torch.tensor([40, 100, 100, 200], dtype=torch.int32)


case("swiglu_forward/bf16", lambda: {"x": _x(200, 2 * 1024)})(
    lambda tk, x: tk.quant.swiglu_forward(x, "bf16"))
case("swiglu_forward/bf16/psum-weights-clamp", lambda: {"x": _x(256, 2 * 1024), "p": _psum(),
                                                        "w": torch.rand(256), "c": torch.zeros(4, dtype=torch.int64)})(
    lambda tk, x, p, w, c: tk.quant.swiglu_forward(x, "bf16", p, w, 2.5, 7.0, c))
for _fmt, _g, _opts in (("e4m3", 128, {}), ("e4m3", 128, {"round_sf": True, "use_packed_ue8m0": True,
                                                          "use_tma_aligned_col_major_sf": True}),
                        ("e4m3", 32, {})):
    case(f"swiglu_forward_and_per_token_cast/{_fmt}/{_g}/{'opts' if _opts else 'plain'}",
         lambda: {"x": _x(200, 2 * 2048)})(
        lambda tk, x, f=_fmt, g=_g, o=_opts: tk.quant.swiglu_forward_and_per_token_cast(x, f, g, **o))
case("swiglu_backward/bf16", lambda: {"x": _x(200, 2 * 1024), "g": _x(200, 1024)})(
    lambda tk, x, g: tk.quant.swiglu_backward(x, g, "bf16"))
case("swiglu_backward_and_per_token_cast/e4m3", lambda: {"d": _x(200, 2 * 1024).to(E4M3), "s": torch.rand(200, 16),
                                                        "g": _x(200, 1024)})(
    lambda tk, d, s, g: tk.quant.swiglu_backward_and_per_token_cast((d, s), g, "e4m3", 128))
case("swiglu_forward_and_per_channel_cast_and_transpose/e4m3", lambda: {"x": _x(256, 2 * 512)})(
    lambda tk, x: tk.quant.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", 128))
case("norm_forward", lambda: {"x": _x(130, 7168), "w": _x(1, 7168)[0]})(
    lambda tk, x, w: tk.quant.norm_forward(x, w, 1e-6, with_rstd=True))
case("norm_forward/residual", lambda: {"x": _x(130, 4096), "w": _x(1, 4096)[0], "r": _x(130, 4096)})(
    lambda tk, x, w, r: tk.quant.norm_forward(x, w, 1e-6, residual=r, out_scale=0.75))
for _fmt, _g, _opts in (("e4m3", 32, {}), ("e4m3", 32, {"round_sf": True, "use_packed_ue8m0": True})):
    case(f"norm_forward_and_per_token_cast/{_fmt}/{_g}/{'ue8m0' if _opts else 'fp32sf'}",
         lambda: {"x": _x(130, 7168), "w": _x(1, 7168)[0]})(
        lambda tk, x, w, f=_fmt, g=_g, o=_opts: tk.quant.norm_forward_and_per_token_cast(x, w, 1e-6, f, g, **o))
case("norm_backward", lambda: {"og": _x(130, 4096), "x": _x(130, 4096), "w": _x(1, 4096)[0],
                               "rstd": torch.rand(130) + 0.5})(
    lambda tk, og, x, w, rstd: tk.quant.norm_backward(og, x, w, rstd))


# --- moe -----------------------------------------------------------------------------------------------------
for _e, _k in ((256, 8), (64, 6), (72, 4)):
    case(f"topk_gate/{_e}/{_k}", lambda e=_e: {"s": torch.randn(128, e)})(
        lambda tk, s, k=_k: tk.moe.topk_gate(s, k))
case("normalize_weight", lambda: {"w": torch.rand(128, 8)})(lambda tk, w: tk.moe.normalize_weight(w))
case("top2_sum_gate/v3", lambda: {"lg": torch.randn(128, 256), "b": torch.randn(256)})(
    lambda tk, lg, b: tk.moe.top2_sum_gate(lg, b, 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, "sigmoid"))
case("topk_sum_and_topk_group_idx", lambda: {"s": torch.randn(128, 256)})(
    lambda tk, s: tk.moe.topk_sum_and_topk_group_idx(s.view(128, 8, 32), 2, 4))
case("moe_topk_gate_forward/sqrtsoftplus", lambda: {"lg": torch.randn(128, 256)})(
    lambda tk, lg: tk.moe.moe_topk_gate_forward(lg, 8, False, 0, 2.5, 0))
case("moe_topk_gate_forward/bias-shared", lambda: {"lg": torch.randn(128, 256), "b": torch.randn(256)})(
    lambda tk, lg, b: tk.moe.moe_topk_gate_forward(lg, 8, True, 1, 2.5, 0, bias=b))
case("moe_topk_gate_backward", lambda: {"s": torch.rand(128, 256), "i": torch.randint(0, 256, (128, 8)),
                                        "w": torch.rand(128, 8), "g": torch.randn(128, 8)})(
    lambda tk, s, i, w, g: tk.moe.moe_topk_gate_backward(s, i, w, g, 2.5))
case("get_fused_mapping/no-sync", lambda: {"i": torch.randint(0, 64, (200, 8))})(
    lambda tk, i: tk.moe.get_fused_mapping(i, 64, 4096, 128, force_no_sync=True))
case("expand_to_fused", lambda: {"x": _x(100, 1024), "t2p": torch.randint(-1, 400, (100, 8), dtype=torch.int32),
                                 "p2e": torch.randint(-1, 64, (800,), dtype=torch.int32)})(
    lambda tk, x, t2p, p2e: tk.moe.expand_to_fused(x, t2p, p2e))
case("expand_to_fused_with_sf", lambda: {"d": _x(100, 1024).to(E4M3), "s": torch.rand(100, 8),
                                         "t2p": torch.randint(-1, 400, (100, 8), dtype=torch.int32),
                                         "p2e": torch.randint(-1, 64, (800,), dtype=torch.int32)})(
    lambda tk, d, s, t2p, p2e: tk.moe.expand_to_fused_with_sf((d, s), 128, t2p, p2e))
case("reduce_fused", lambda: {"x": _x(800, 1024), "w": torch.rand(100, 8),
                              "t2p": torch.randint(-1, 800, (100, 8), dtype=torch.int32)})(
    lambda tk, x, w, t2p: tk.moe.reduce_fused(x, w, t2p))
case("reduce_fused/x_sf->e4m3", lambda: {"x": _x(800, 1024), "xs": torch.rand(800), "s": torch.tensor([0.7]),
                                         "t2p": torch.randint(-1, 800, (100, 8), dtype=torch.int32)})(
    lambda tk, x, xs, s, t2p: tk.moe.reduce_fused((x, xs), None, t2p, "e4m3", s))
case("mask_indices_by_tp", lambda: {"i": torch.randint(-1, 256, (128, 8))})(
    lambda tk, i: tk.moe.mask_indices_by_tp(i, 256, 8, 1, 2))
case("group_count", lambda: {"g": torch.randint(0, 16, (128, 4))})(lambda tk, g: tk.moe.group_count(g, 16))
case("aux_fi", lambda: {"i": torch.randint(0, 256, (128, 8))})(lambda tk, i: tk.moe.aux_fi(i, 256, 8))
case("inplace_unique_group_indices", lambda: {"g": torch.randint(0, 8, (128, 4))})(
    lambda tk, g: tk.moe.inplace_unique_group_indices(g, 8))


# --- transpose -----------------------------------------------------------------------------------------------
for _dtype in (BF16, F32, E4M3):
    case(f"transpose/{_dtype}", lambda d=_dtype: {"x": _x(320, 512).to(d)})(lambda tk, x: tk.transpose.transpose(x))
    case(f"batched_transpose/{_dtype}", lambda d=_dtype: {"x": torch.randn(3, 256, 128).to(d)})(
        lambda tk, x: tk.transpose.batched_transpose(x))
