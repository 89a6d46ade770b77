"""Benchmarks of the 2.1 fused router (issue 4, brief L) on DeepSeek-V3 shapes; JSON like bench_foundation.

  python benchmarks/bench_ops_router21.py --out results.json

moe_topk_gate_forward at T=16384, E=256, K=8 (target <= 15 us): plain, with bias + shared expert + scores,
and with every option; bytes = logits read + outputs written (+ scores, bias, masks where used).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def main():
    import kernelkiln
    args, ceiling = start(__doc__, tokens=16384)
    T, E, K = args.tokens, 256, 8
    records = []
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
            return kernelkiln.moe.moe_topk_gate_forward(logits, K, shared > 0, shared, 2.5, 0, **kw)
        idx, w = fn()
        records.append(bandwidth_record(name, {"T": T, "E": E, "K": K, "S": shared}, fn, nbytes(*tensors, idx, w),
                                        ceiling, target_us=15))
    kernelkiln.check_errors()
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
