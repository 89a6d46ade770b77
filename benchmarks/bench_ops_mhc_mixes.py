"""Benchmark of the mHC mix ops: head mix, split mixes, fn/normw merge and split-K reduce + RMS norm, forward and
backward.

  python benchmarks/bench_ops_mhc_mixes.py --out results.json

Records at m 4 (m3 24), DeepSeek-V4's: the head and split mixes at 8192 and 65536 tokens (the backwards with P =
the SM count, as the ops use it), the fn/normw merge and its backward for fn [24, 4·H] at H 2560 / 4096 / 7168,
the reduce + RMS norm with 16 splits at 8192 tokens and its backward. These are small, latency-bound kernels at
model shapes; bytes = every input read and every output written once (accumulators read and written), % of the
copy ceiling measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, start, write_results  # noqa: E402

M, M3 = 4, 24


def _mix_records(mhc, ceiling, num_sms):
    out = []
    for n in (8192, 65536):
        x, go = torch.randn(n, M, device="cuda"), torch.randn(n, M, device="cuda")
        scale, base = torch.randn(1, device="cuda"), torch.randn(M, device="cuda")
        o, gi = torch.empty_like(x), torch.empty_like(x)
        sp, bp = torch.empty(num_sms, 1, device="cuda"), torch.empty(num_sms, M, device="cuda")
        out.append(bandwidth_record("mhc_head_compute_mix_fwd", {"n": n, "m": M},
                                    lambda x=x, s=scale, b=base, o=o: mhc.mhc_head_compute_mix_fwd(x, s, b, o, 1e-6),
                                    2 * n * M * 4, ceiling))
        out.append(bandwidth_record("mhc_head_compute_mix_bwd", {"n": n, "m": M, "P": num_sms},
                                    lambda go=go, x=x, s=scale, b=base, gi=gi, sp=sp, bp=bp:
                                    mhc.mhc_head_compute_mix_bwd(go, x, s, b, gi, sp, bp, num_sms),
                                    3 * n * M * 4, ceiling))
        a = torch.randn(n, M3, device="cuda")
        s3, b3 = torch.randn(3, device="cuda"), torch.randn(M3, device="cuda")
        pre, post, comb = torch.empty(n, M, device="cuda"), torch.empty(n, M, device="cuda"), torch.empty(
            n, M * M, device="cuda")
        out.append(bandwidth_record("mhc_pre_split_mixes_fwd", {"n": n, "m": M},
                                    lambda a=a, s=s3, b=b3, p=pre, q=post, c=comb:
                                    mhc.mhc_pre_split_mixes_fwd(a, s, b, p, q, c, 2.0, 1e-6),
                                    2 * n * M3 * 4, ceiling))
        gp, gq, gc = torch.randn_like(pre), torch.randn_like(post), torch.randn_like(comb)
        ga, sg, bg = torch.empty_like(a), torch.empty(3, device="cuda"), torch.empty(M3, device="cuda")
        out.append(bandwidth_record("mhc_pre_split_mixes_bwd", {"n": n, "m": M, "P": num_sms},
                                    lambda gp=gp, gq=gq, gc=gc, a=a, q=post, s=s3, b=b3, ga=ga, sg=sg, bg=bg:
                                    mhc.mhc_pre_split_mixes_bwd(gp, gq, gc, a, q, s, b, ga, sg, bg, 2.0),
                                    n * (M3 + M3 + M + M3) * 4, ceiling))
    return out


def _merge_records(mhc, ceiling):
    out = []
    for h in (2560, 4096, 7168):
        fn, w = torch.randn(M3, M * h, device="cuda"), torch.randn(M * h, device="cuda")
        o, g, fg, wg = torch.empty_like(fn), torch.randn_like(fn), torch.zeros_like(fn), torch.zeros_like(w)
        shape = {"rows": M3, "cols": M * h}
        out.append(bandwidth_record("mhc_fn_normw_merge_fwd", shape,
                                    lambda fn=fn, w=w, o=o: mhc.mhc_fn_normw_merge_fwd(fn, w, o),
                                    (2 * fn.numel() + w.numel()) * 4, ceiling))
        out.append(bandwidth_record("mhc_fn_normw_merge_bwd", shape,
                                    lambda fn=fn, w=w, g=g, fg=fg, wg=wg: mhc.mhc_fn_normw_merge_bwd(fn, w, g, fg, wg),
                                    (4 * fn.numel() + 3 * w.numel()) * 4, ceiling))
    return out


def _reduce_records(mhc, ceiling):
    n, s, h = 8192, 16, 4096
    oms, sqs = torch.randn(s, n, 1, M3, device="cuda"), torch.rand(s, n, 1, device="cuda")
    om, sq, o = torch.empty(n, 1, M3, device="cuda"), torch.empty(n, 1, device="cuda"), torch.empty(n, M3, device="cuda")
    og, omg, sqg = torch.randn(n, M3, device="cuda"), torch.empty_like(om), torch.empty_like(sq)
    shape = {"n": n, "S": s, "G": 1, "m3": M3}
    return [bandwidth_record("mhc_reduce_partials_and_rmsnorm_fwd", shape,
                             lambda: mhc.mhc_reduce_partials_and_rmsnorm_fwd(oms, sqs, om, sq, o, M * h, 1e-6, s),
                             (oms.numel() + sqs.numel() + om.numel() + sq.numel() + o.numel()) * 4, ceiling),
            bandwidth_record("mhc_reduce_partials_and_rmsnorm_bwd", {"n": n, "G": 1, "m3": M3},
                             lambda: mhc.mhc_reduce_partials_and_rmsnorm_bwd(og, om, sq, omg, sqg, M * h, 1e-6),
                             (og.numel() + 2 * om.numel() + 2 * sq.numel()) * 4, ceiling)]


def main():
    import kernelkiln
    from kernelkiln import config
    args, ceiling = start(__doc__, tokens=8192)
    mhc = kernelkiln.mhc
    records = (_mix_records(mhc, ceiling, config.get_num_sms()) + _merge_records(mhc, ceiling)
               + _reduce_records(mhc, ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
