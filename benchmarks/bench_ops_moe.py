"""Benchmarks of the router and transpose ops (issue 4) on DeepSeek-V3 shapes; JSON like bench_foundation.

  python benchmarks/bench_ops_moe.py --out results.json

Records: top2_sum_gate (T=16384, E=256, 8 groups, top-4 groups, K=8; target <= 15 us),
normalize_weight (T=16384, K=8), batched_transpose / transpose (e4m3, bf16, fp32; bytes
= input read once + output written once, with % of the copy ceiling measured in the same run).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def main():
    import kernelkiln
    args, ceiling = start(__doc__, tokens=16384)
    T = args.tokens
    records = []

    def record(name, fn, inputs, outputs, params, target_us=None):
        records.append(bandwidth_record(name, params, fn, nbytes(*inputs, *outputs), ceiling, target_us=target_us))

    e = 256
    logits = torch.randn(T, e, device="cuda")
    bias = torch.randn(e, device="cuda") * 0.1
    for scoring in ("sigmoid", "sqrtsoftplus"):
        def gate(scoring=scoring):
            return kernelkiln.moe.top2_sum_gate(logits, bias, 8, 4, 8, False, 0, 2.5, 0, 1, 0, 1, scoring)
        idx, w = gate()
        record("top2_sum_gate", gate, (logits, bias), (idx, w),
               {"T": T, "E": e, "groups": 8, "topk_groups": 4, "K": 8, "scoring": scoring}, target_us=15)
    mask = torch.ones(T, dtype=torch.bool, device="cuda")
    phys = torch.randint(0, e + 32, (e + 1, 33), device="cuda", dtype=torch.int32)
    count = torch.randint(1, 34, (e + 1,), device="cuda", dtype=torch.int32)
    un = torch.empty(T, 8, dtype=torch.int64, device="cuda")

    def full_gate():
        return kernelkiln.moe.top2_sum_gate(logits, bias, 8, 4, 8, True, 1, 2.5, 0, 8, 0, 1, "sigmoid", mask=mask,
                                          to_physical_map=phys, logical_count=count, unmapped_topk_idx=un)
    idx, w = full_gate()
    record("top2_sum_gate", full_gate, (logits, bias, mask), (idx, w, un),
           {"T": T, "E": e, "groups": 8, "topk_groups": 4, "K": 8, "S": 1, "mask": True, "eplb_map": True,
            "ep": 8}, target_us=15)

    tw = torch.rand(T, 8, device="cuda")
    den, out = kernelkiln.moe.normalize_weight(tw)
    record("normalize_weight", lambda: kernelkiln.moe.normalize_weight(tw), (tw,), (den, out), {"T": T, "K": 8})

    for dtype in (torch.bfloat16, torch.float32, torch.float8_e4m3fn):
        for b, m, n in ((8, 7168, 4096), (8, 2048, 7168)):
            x = torch.randn(b, m, n, device="cuda").to(dtype)
            y = kernelkiln.transpose.batched_transpose(x)
            record("batched_transpose", lambda x=x: kernelkiln.transpose.batched_transpose(x), (x,), (y,),
                   {"B": b, "M": m, "N": n, "dtype": str(dtype).replace("torch.", "")})
        x = torch.randn(T, 7168, device="cuda").to(dtype)
        y = kernelkiln.transpose.transpose(x)
        record("transpose", lambda x=x: kernelkiln.transpose.transpose(x), (x,), (y,),
               {"M": T, "N": 7168, "dtype": str(dtype).replace("torch.", "")})

    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
