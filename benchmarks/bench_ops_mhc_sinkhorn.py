"""Benchmark of mhc_sinkhorn_fwd, mhc_sinkhorn_bwd and mhc_pre_big_fuse_fwd.

  python benchmarks/bench_ops_mhc_sinkhorn.py --out results.json

Records: the Sinkhorn forward and backward at m 4 for 4096 and 16384 tokens, repeat 10 and 20 (DeepSeek-V4's), and
the backward at repeat 30 (beyond the 20 rounds the shared-memory ring holds: two forward passes); the fused
pre-block at m 4, 16 splits, repeat 20, post_mult 2.0 for 4096 and 8192 tokens at H 2560 / 4096 / 7168, and in
the same run the unfused chain it replaces on the same inputs (reduce partials + RMS norm, split mixes, Sinkhorn,
apply mix): each op alone, and the four in one graph; the fused record carries the ratios fused / Σ chain ops,
fused / chain graph, and the floor of that ratio (the fused op's bytes at the copy ceiling / Σ chain ops). The
Sinkhorn is compute-bound at these sizes (its bytes are a latency figure); the fused pre-block is memory-bound.
Bytes = every input read and every output written once; % of the copy ceiling measured in the same run.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402

M = 4


def _sinkhorn_records(kernelkiln, ceiling):
    out = []
    for n in (4096, 16384):
        x = torch.randn(n, M, M, device="cuda")
        go, y, gi = torch.randn_like(x), torch.empty_like(x), torch.empty_like(x)
        for repeat in (10, 20):
            out.append(bandwidth_record(
                "mhc_sinkhorn_fwd", {"n": n, "m": M, "repeat": repeat},
                lambda x=x, y=y, r=repeat: kernelkiln.mhc.mhc_sinkhorn_fwd(x, y, r, 1e-6), nbytes(x, y), ceiling))
        for repeat in (10, 20, 30):
            out.append(bandwidth_record(
                "mhc_sinkhorn_bwd", {"n": n, "m": M, "repeat": repeat},
                lambda go=go, x=x, gi=gi, r=repeat: kernelkiln.mhc.mhc_sinkhorn_bwd(go, x, gi, r, 1e-6),
                nbytes(go, x, gi), ceiling))
    return out


def _chain_parts(kernelkiln, gm, gs, scale, base, residual, s):
    """The unfused chain that mhc_pre_big_fuse_fwd replaces, on the same inputs (the GPU test's _unfused): reduce
    partials + RMS norm (one group of m·H), split mixes, Sinkhorn, apply mix. Returns [(name, fn, bytes)]."""
    n, m, h = residual.shape
    m3 = m * (m + 2)
    dev = residual.device
    out_mul, sqrsum, mixes = (torch.empty(n, 1, m3, device=dev), torch.empty(n, 1, device=dev),
                              torch.empty(n, m3, device=dev))
    pre, post, comb = torch.empty(n, m, device=dev), torch.empty(n, m, device=dev), torch.empty(n, m * m, device=dev)
    comb_out = torch.empty(n, m, m, device=dev)
    li = torch.empty(n, h, device=dev, dtype=torch.bfloat16)
    gm4, gs3 = gm.view(s, n, 1, m3), gs.view(s, n, 1)
    return [
        ("mhc_reduce_partials_and_rmsnorm_fwd",
         lambda: kernelkiln.mhc.mhc_reduce_partials_and_rmsnorm_fwd(gm4, gs3, out_mul, sqrsum, mixes, m * h, 1e-6, s),
         nbytes(gm, gs, out_mul, sqrsum, mixes)),
        ("mhc_pre_split_mixes_fwd",
         lambda: kernelkiln.mhc.mhc_pre_split_mixes_fwd(mixes, scale, base, pre, post, comb, 2.0, 1e-6),
         nbytes(mixes, scale, base, pre, post, comb)),
        ("mhc_sinkhorn_fwd", lambda: kernelkiln.mhc.mhc_sinkhorn_fwd(comb.view(n, m, m), comb_out, 20, 1e-6),
         nbytes(comb, comb_out)),
        ("mhc_pre_apply_mix_fwd", lambda: kernelkiln.mhc.mhc_pre_apply_mix_fwd(residual, pre, li),
         nbytes(residual, pre, li)),
    ]


def _big_fuse_records(kernelkiln, ceiling):
    """The fused pre-block, then in the same run the unfused chain it replaces (the issue's target: fused <= 0.8 x
    the sum of the chain's op times): each op of the chain timed alone, and the four in one graph."""
    out = []
    s, m3 = 16, M * (M + 2)
    for n in (4096, 8192):
        for h in (2560, 4096, 7168):
            gm = torch.randn(s, n, m3, device="cuda") * 1e-2
            gs = torch.rand(s, n, device="cuda") * h
            scale, base = torch.randn(3, device="cuda") * 0.1, torch.randn(m3, device="cuda") * 0.1
            residual = torch.randn(n, M, h, device="cuda").bfloat16()
            post, comb = torch.empty(n, M, device="cuda"), torch.empty(n, M * M, device="cuda")
            li = torch.empty(n, h, device="cuda", dtype=torch.bfloat16)

            def fn(gm=gm, gs=gs, scale=scale, base=base, residual=residual, post=post, comb=comb, li=li):
                kernelkiln.mhc.mhc_pre_big_fuse_fwd(gm, gs, scale, base, residual, post, comb, li, 1e-6, 1e-6, 1e-6,
                                                    2.0, 20, s)

            params = {"n": n, "m": M, "H": h, "n_splits": s, "repeat": 20}
            fused_bytes = nbytes(gm, gs, scale, base, residual, post, comb, li)
            fused = bandwidth_record("mhc_pre_big_fuse_fwd", params, fn, fused_bytes, ceiling)
            parts = _chain_parts(kernelkiln, gm, gs, scale, base, residual, s)
            part_us = {}
            for name, part, moved in parts:
                rec = bandwidth_record(name, {**params, "in_chain_of": "mhc_pre_big_fuse_fwd"}, part, moved, ceiling)
                part_us[name] = rec["time_us"]
                out.append(rec)

            def chain(parts=parts):
                for _, part, _ in parts:
                    part()

            chain_rec = bandwidth_record("mhc_pre_big_fuse_fwd unfused chain (one graph)", params, chain,
                                         sum(moved for _, _, moved in parts), ceiling, parts_us=part_us)
            chain_sum = sum(part_us.values())
            fused["chain_sum_us"] = round(chain_sum, 2)
            fused["chain_graph_us"] = chain_rec["time_us"]
            fused["ratio_to_chain_sum"] = round(fused["time_us"] / chain_sum, 3)
            fused["ratio_to_chain_graph"] = round(fused["time_us"] / chain_rec["time_us"], 3)
            # the fused op must still read the residual and write the layer input: its time at the copy ceiling
            fused["ratio_floor_at_copy_ceiling"] = round(fused_bytes / (ceiling * 1e3) / chain_sum, 3)
            print(json.dumps({"big_fuse_vs_chain": params, "fused_us": fused["time_us"], "chain_sum_us": chain_sum,
                              "chain_graph_us": chain_rec["time_us"], "ratio": fused["ratio_to_chain_sum"],
                              "floor": fused["ratio_floor_at_copy_ceiling"]}), flush=True)
            out += [fused, chain_rec]
    return out


def main():
    import kernelkiln
    args, ceiling = start(__doc__)
    records = _sinkhorn_records(kernelkiln, ceiling) + _big_fuse_records(kernelkiln, ceiling)
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
