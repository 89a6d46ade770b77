"""Benchmark of mhc_sinkhorn_fwd, mhc_sinkhorn_bwd and mhc_pre_big_fuse_fwd.

  python benchmarks/bench_ops_mhc_sinkhorn.py --out results.json

Records: the Sinkhorn forward and backward at m 4 for 4096 and 16384 tokens, repeat 10 and 20 (DeepSeek-V4's), and
the backward at repeat 30 (beyond the 20 rounds the shared-memory ring holds: two forward passes); the fused
pre-block at m 4, 16 splits, repeat 20, post_mult 2.0 for 4096 and 8192 tokens at H 2560 / 4096 / 7168. The
Sinkhorn is compute-bound at these sizes (its bytes are a latency figure); the fused pre-block is memory-bound.
Bytes = every input read and every output written once; % of the copy ceiling measured in the same run.
"""
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


def _big_fuse_records(kernelkiln, ceiling):
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

            out.append(bandwidth_record("mhc_pre_big_fuse_fwd", {"n": n, "m": M, "H": h, "n_splits": s, "repeat": 20},
                                        fn, nbytes(gm, gs, scale, base, residual, post, comb, li), ceiling))
    return out


def main():
    import kernelkiln
    args, ceiling = start(__doc__)
    records = _sinkhorn_records(kernelkiln, ceiling) + _big_fuse_records(kernelkiln, ceiling)
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
