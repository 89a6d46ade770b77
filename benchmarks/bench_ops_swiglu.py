"""SwiGLU benchmarks on the GPU (DeepSeek-V3 MoE: I = 2048, T = 16384 expanded tokens): one JSON record each.

    python benchmarks/bench_ops_swiglu.py --out results.json

Bytes = each input read once + each output written once, valid rows only (padding rows are
neither read nor written): x N_valid*2I*b_in, topk_weights 4N, psum 4E, data N_valid*I*b_out,
scales at their allocated size. Target: e4m3 1x128 >= 90% of the measured copy bandwidth
(peer tile_kernels 2.1: ~76%).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, copy_ceiling_gbs, nbytes, write_results  # noqa: E402

import kernelkiln  # noqa: E402


def _psum(n_valid, experts, alignment=128):
    """Equal experts of n_valid/experts tokens each, starting aligned: (psum, N)."""
    per = n_valid // experts
    ends, end = [], 0
    for _ in range(experts):
        start = -(-end // alignment) * alignment
        end = start + per
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32, device="cuda"), -(-end // alignment) * alignment


def _backward_records(t, i, ceiling):
    """swiglu_backward[_and_per_token_cast], bytes per docs/SPEC.md §3.2 (B): x e4m3 N*2I + x sf
    N*(2I/g)*4 + act_x_grad N*I*b_g (+4N weights) + x_grad bf16 N*2I*2 + x_grad e4m3 N*2I + sf
    (+4N weight_grad) (+N*I*2 act_out); padding rows are written (zeros) but not read."""
    records = []
    for experts in (0, 32):
        psum, n = (None, t) if experts == 0 else _psum(t, experts)
        w = torch.rand(n, device="cuda")
        base = dict(tokens=t, inter=i, experts=experts, weights=True)
        dy = torch.randn(n, i, device="cuda").to(torch.bfloat16)
        for g, round_sf, packed, recompute in ((128, False, False, False), (128, True, True, False),
                                               (32, True, False, False), (128, False, False, True)):
            data = torch.randn(n, 2 * i, device="cuda").to(torch.float8_e4m3fn)
            x_sf = torch.rand(n, 2 * i // g, device="cuda")

            def fn(g=g, round_sf=round_sf, packed=packed, recompute=recompute, data=data, x_sf=x_sf, psum=psum,
                   dy=dy, w=w):
                return kernelkiln.quant.swiglu_backward_and_per_token_cast(
                    (data, x_sf), dy, "e4m3", g, psum, w, 2.5, round_sf=round_sf, use_packed_ue8m0=packed,
                    do_recompute=recompute)
            out = fn()
            moved = (t * 2 * i + t * (2 * i // g) * 4 + t * i * 2 + nbytes(w) + (nbytes(psum) if psum is not None
                     else 0) + nbytes(out[0]) + nbytes(out[1][0]) + nbytes(out[1][1]) + nbytes(out[2]) +
                     (nbytes(out[3]) if recompute else 0))
            records.append(bandwidth_record("swiglu_backward_and_per_token_cast",
                                   dict(base, x="e4m3", grad="bf16", g=g, round_sf=round_sf, ue8m0=packed,
                                        recompute=recompute), fn, moved, ceiling))
        x = torch.randn(n, 2 * i, device="cuda").to(torch.bfloat16)
        out = kernelkiln.quant.swiglu_backward(x, dy, "bf16", psum, w, 2.5)
        moved = t * 2 * i * 2 + t * i * 2 + nbytes(w) + nbytes(out[0]) + nbytes(out[1])
        records.append(bandwidth_record("swiglu_backward", dict(base, x="bf16", fmt="bf16"),
                               lambda x=x, dy=dy, psum=psum, w=w: kernelkiln.quant.swiglu_backward(
                                   x, dy, "bf16", psum, w, 2.5), moved, ceiling))
    return records


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--ops", choices=("all", "forward", "backward"), default="all")
    args = ap.parse_args()
    t, i = args.tokens, args.inter
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbs()
    records = []
    if args.ops != "forward":
        records += _backward_records(t, i, ceiling)
    for experts in ((0, 32) if args.ops != "backward" else ()):
        psum, n = (None, t) if experts == 0 else _psum(t, experts)
        x = torch.randn(n, 2 * i, device="cuda").to(torch.bfloat16)
        w = torch.rand(n, device="cuda")
        n_valid = t
        x_bytes = n_valid * 2 * i * 2 + nbytes(w) + (nbytes(psum) if psum is not None else 0)
        base = dict(tokens=t, inter=i, experts=experts, in_dtype="bf16", weights=True)
        for g, round_sf, packed in ((128, False, False), (128, True, True), (32, True, False)):
            q, sf = kernelkiln.quant.swiglu_forward_and_per_token_cast(x, "e4m3", g, psum, w, 2.5, round_sf=round_sf,
                                                                     use_packed_ue8m0=packed)
            moved = x_bytes + n_valid * i + nbytes(sf)

            def fn(g=g, round_sf=round_sf, packed=packed, psum=psum, x=x, w=w):
                kernelkiln.quant.swiglu_forward_and_per_token_cast(x, "e4m3", g, psum, w, 2.5, round_sf=round_sf,
                                                                 use_packed_ue8m0=packed)
            records.append(bandwidth_record("swiglu_forward_and_per_token_cast",
                                   dict(base, fmt="e4m3", g=g, round_sf=round_sf, ue8m0=packed), fn, moved, ceiling))
        counts = torch.zeros(4, dtype=torch.int64, device="cuda")
        records.append(bandwidth_record(
            "swiglu_forward_and_per_token_cast", dict(base, fmt="e4m3", g=128, clamp=10.0, count=True),
            lambda x=x, w=w, psum=psum: kernelkiln.quant.swiglu_forward_and_per_token_cast(
                x, "e4m3", 128, psum, w, 2.5, clamp_value=10.0, clamped_count=counts),
            x_bytes + n_valid * i + n * (i // 128) * 4, ceiling))
        records.append(bandwidth_record(
            "swiglu_forward", dict(base, fmt="bf16"),
            lambda x=x, w=w, psum=psum: kernelkiln.quant.swiglu_forward(x, "bf16", psum, w, 2.5),
            x_bytes + n_valid * i * 2, ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
