"""Benchmarks of the 2.1 fused router (issue 4, brief L) on DeepSeek-V3 shapes; JSON like bench_foundation.

  python benchmarks/bench_ops_router21.py --out results.json

moe_topk_gate_forward at T=16384, E=256, K=8 (target <= 15 us): plain, with bias + shared expert + scores,
and with every option; bytes = logits read + outputs written (+ scores, bias, masks where used).
"""
import argparse
import json
import sys
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
    T, E, K = args.tokens, 256, 8
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbs()
    records = [{"name": "copy_ceiling", "bandwidth_gbs": ceiling}]
    logits = torch.randn(T, E, device="cuda")
    bias = torch.randn(E, device="cuda") * 0.1
    mask = torch.rand(T, device="cuda") > 0.05
    scores = torch.empty(T, E, device="cuda")
    un = torch.empty(T, K, dtype=torch.int64, device="cuda")
    phys = torch.randint(0, 288, (E + 1, 33), device="cuda", dtype=torch.int32)
    count = torch.randint(1, 34, (E + 1,), device="cuda", dtype=torch.int32)
    cases = [
        ("moe_topk_gate_forward", dict(), [logits], K),
        ("moe_topk_gate_forward+bias+shared+scores", dict(bias=bias, scores=scores), [logits, bias, scores], K + 1),
        ("moe_topk_gate_forward+all", dict(bias=bias, scores=scores, mask=mask, unmapped_topk_idx=un,
                                          to_physical_map=phys, logical_count=count),
         [logits, bias, scores, mask, un, phys, count], K + 1),
    ]
    for name, kw, tensors, width in cases:
        shared = width - K
        def fn(kw=kw, shared=shared):
            return tilekiln.moe.moe_topk_gate_forward(logits, K, shared > 0, shared, 2.5, 0, **kw)
        idx, w = fn()
        t = graph_time_us(fn)
        moved = nbytes(*tensors, idx, w)
        gbs = moved / t / 1e3
        records.append({"name": name, "params": {"T": T, "E": E, "K": K, "S": shared}, "time_us": round(t, 2),
                        "bytes": moved, "bandwidth_gbs": round(gbs, 1), "pct_of_copy": round(100 * gbs / ceiling, 1),
                        "target_us": 15})
    tilekiln.check_errors()
    for r in records:
        print(json.dumps(r))
    Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
