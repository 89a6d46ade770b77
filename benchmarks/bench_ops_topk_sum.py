"""Benchmark of the v1 group ranking topk_sum_and_topk_group_idx on the DeepSeek-V3 router shape.

  python benchmarks/bench_ops_topk_sum.py --out results.json

Records: T=16384, E=256, G=8 groups, 4 groups kept, group score = top-2 sum (V3) and top-1; latency,
bytes = scores read once + indices written once (4TE + 8T*k, docs/SPEC.md §3.1), % of the copy
ceiling measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def main():
    import kernelkiln
    args, ceiling = start(__doc__, tokens=16384)
    t, e, g, k = args.tokens, 256, 8, 4
    records = []
    scores = torch.rand(t, g, e // g, device="cuda")
    for num_topk_sum in (2, 1):
        def fn(num_topk_sum=num_topk_sum):
            return kernelkiln.moe.topk_sum_and_topk_group_idx(scores, num_topk_sum, k)
        out = fn()
        records.append(bandwidth_record(
            "topk_sum_and_topk_group_idx", {"T": t, "E": e, "groups": g, "topk_groups": k, "topk_sum": num_topk_sum},
            fn, nbytes(scores, out), ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
