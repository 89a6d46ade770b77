"""Diagnostics that explain the headline figures: scaling of topk_gate with T, E and K, the
per_token_cast variants (sf-only, scale kinds), and kernel times from CUPTI (torch.profiler)
next to the CUDA-graph replay figure.

    python benchmarks/bench_diagnostics.py --out diag.json
"""
import argparse
import json

import torch

from bench_foundation import copy_ceiling_gbs, graph_time_us


def cupti_kernel_us(fn, iters=30):
    """Median CUPTI device time of the kernels ``fn`` launches (excludes launch gaps)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    times = sorted(e.device_time for e in prof.events() if e.device_type.name == "CUDA" and "kernel" in e.name)
    return times[len(times) // 2] if times else float("nan")


def main():
    import kernelkiln
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rec = []
    ceiling = copy_ceiling_gbs()
    a = torch.empty(1 << 28, device="cuda")
    b = torch.empty_like(a)
    graph_gbs = 2 * a.numel() * 4 / graph_time_us(lambda: b.copy_(a), calls=5, reps=10) / 1e3
    rec.append({"name": "copy_ceiling", "events_gbs": round(ceiling, 1), "graph_memcpy_gbs": round(graph_gbs, 1)})

    for t in (1, 1024, 16384, 65536):
        for e, k in ((256, 1), (256, 8), (256, 32), (32, 8), (384, 8)):
            s = torch.randn(t, e, device="cuda")
            f = lambda: kernelkiln.moe.topk_gate(s, k)  # noqa: E731
            rec.append({"name": "topk_gate", "T": t, "E": e, "K": k, "graph_us": round(graph_time_us(f), 2),
                        "cupti_us": round(cupti_kernel_us(f), 2)})
        s = torch.randn(t, 256, device="cuda")
        rec.append({"name": "torch.topk", "T": t, "E": 256, "K": 8,
                    "graph_us": round(graph_time_us(lambda: torch.topk(s, 8)), 2)})

    T, H = 16384, 7168
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    cases = [("e4m3", 128, {}), ("e4m3", 128, {"round_sf": True}), ("e4m3", 32, {}), ("e4m3", 128, {"use_e4m3_sf": True}),
             ("e2m1", 32, {}), ("e2m1", 32, {"round_sf": True, "use_packed_ue8m0": True}), ("e2m1", 16, {"use_e4m3_sf": True})]
    for fmt, g, opts in cases:
        q, sf = kernelkiln.quant.per_token_cast(x, fmt, g, **opts)
        moved = x.numel() * 2 + q.numel() * q.element_size() + sf.numel() * sf.element_size()
        f = lambda: kernelkiln.quant.per_token_cast(x, fmt, g, **opts)  # noqa: E731
        t_us = graph_time_us(f)
        fs = lambda: kernelkiln.quant.per_token_cast_with_sf_only(x, fmt, g, **opts)  # noqa: E731
        rec.append({"name": "per_token_cast", "fmt": fmt, "g": g, **opts, "graph_us": round(t_us, 2),
                    "cupti_us": round(cupti_kernel_us(f), 2), "pct_of_copy": round(100 * moved / t_us / 1e3 / ceiling, 1),
                    "sf_only_graph_us": round(graph_time_us(fs), 2)})
    with open(args.out, "w") as fh:
        json.dump(rec, fh, indent=1)
    for r in rec:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
