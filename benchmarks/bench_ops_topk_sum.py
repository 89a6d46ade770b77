"""Benchmark of the v1 group ranking topk_sum_and_topk_group_idx on the DeepSeek-V3 router shape.

  python benchmarks/bench_ops_topk_sum.py --out results.json

Records: T=16384, E=256, G=8 groups, 4 groups kept, group score = top-2 sum (V3) and top-1; latency,
bytes = scores read once + indices written once (4TE + 8T*k, OPERATORS.md §3.1), % of the copy
ceiling measured in the same run.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import copy_ceiling_gbs, graph_time_us, nbytes  # noqa: E402


def main():
    import tilekiln
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--tokens", type=int, default=16384)
    args = p.parse_args()
    t, e, g, k = args.tokens, 256, 8, 4
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbs()
    records = [{"name": "copy_ceiling", "bandwidth_gbs": ceiling}]
    scores = torch.rand(t, g, e // g, device="cuda")
    for num_topk_sum in (2, 1):
        def fn(num_topk_sum=num_topk_sum):
            return tilekiln.moe.topk_sum_and_topk_group_idx(scores, num_topk_sum, k)
        out = fn()
        time_us = graph_time_us(fn)
        moved = nbytes(scores, out)
        gbs = moved / time_us / 1e3
        records.append({"name": "topk_sum_and_topk_group_idx",
                        "params": {"T": t, "E": e, "groups": g, "topk_groups": k, "topk_sum": num_topk_sum},
                        "time_us": round(time_us, 2), "bytes": moved, "bandwidth_gbs": round(gbs, 1),
                        "pct_of_copy": round(100 * gbs / ceiling, 1)})

    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "tilekiln": tilekiln.__version__,
            "command": " ".join(sys.argv)}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "records": records}, f, indent=1)
    for r in records:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
