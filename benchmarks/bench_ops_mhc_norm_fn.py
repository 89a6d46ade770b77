"""Benchmark of the v1 pre-norm projection ops (mhc_pre_norm_fn_fwd_mul / _bwd_mul): the TF32 GEMM of the flattened
residual streams with the mix weights, and its backward.

  python benchmarks/bench_ops_mhc_norm_fn.py --out results.json

Records at m 4 (m3 24) on the peer's norm_fn test grid, n 4096 / 8192 tokens x H 1280 / 2560 / 7168 (K = 4·H). The
forward streams x once (bytes: x read, fn read once, out_mul and sqrsum written); the backward reads x, x_grad and
the gradients and writes x_grad and fn_grad (fn read once). Both are bandwidth-bound: % of the copy ceiling
measured in the same run. The weight's re-reads by every CTA hit L2 and are not counted.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, start, write_results  # noqa: E402

M, M3 = 4, 24


def _records(mhc, round_to_tf32, ceiling):
    out = []
    for n in (4096, 8192):
        for h in (1280, 2560, 7168):
            k = M * h
            x = torch.randn(n, k, device="cuda").bfloat16()
            fn = round_to_tf32(torch.randn(M3, k, device="cuda") * 1e-4)
            om, sq = torch.empty(n, 1, M3, device="cuda"), torch.empty(n, 1, device="cuda")
            shape = {"n": n, "h": h, "m3": M3}
            out.append(bandwidth_record("mhc_pre_norm_fn_fwd_mul", shape,
                                        lambda x=x, fn=fn, om=om, sq=sq: mhc.mhc_pre_norm_fn_fwd_mul(x, fn, om, sq),
                                        x.numel() * 2 + fn.numel() * 4 + (om.numel() + sq.numel()) * 4, ceiling))
            g = round_to_tf32(torch.randn(n, 1, M3, device="cuda"))
            sg = torch.randn(n, 1, device="cuda")
            xg, fg = torch.zeros_like(x), torch.empty_like(fn)
            out.append(bandwidth_record("mhc_pre_norm_fn_bwd_mul", shape,
                                        lambda g=g, sg=sg, x=x, fn=fn, xg=xg, fg=fg:
                                        mhc.mhc_pre_norm_fn_bwd_mul(g, sg, x, fn, xg, fg),
                                        3 * x.numel() * 2 + 2 * fn.numel() * 4 + (g.numel() + sg.numel()) * 4,
                                        ceiling))
    return out


def main():
    import kernelkiln
    from kernelkiln._formats import round_to_tf32
    args, ceiling = start(__doc__, tokens=8192)
    write_results(args.out, ceiling, _records(kernelkiln.mhc, round_to_tf32, ceiling))


if __name__ == "__main__":
    main()
