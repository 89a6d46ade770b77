"""Tuning sweep (manifests/experiment-rows.toml): per_token_cast rows per thread.

    KERNELKILN_KERNEL_DIR=<store built from the experiment manifest> python benchmarks/bench_tuning.py --out t.json
"""
import argparse
import json

import torch

from bench_foundation import copy_ceiling_gbs, graph_time_us


def main():
    import kernelkiln
    from kernelkiln.quant import _per_token
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    ceiling = copy_ceiling_gbs()
    T, H = 16384, 7168
    rec = [{"name": "copy_ceiling", "bandwidth_gbs": round(ceiling, 1)}]
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    cases = [("e4m3", 128, {}), ("e4m3", 128, {"round_sf": True, "use_packed_ue8m0": True}),
             ("e2m1", 32, {}), ("e2m1", 32, {"round_sf": True, "use_packed_ue8m0": True})]
    for rows in (2, 4):
        _per_token.ROWS.update({("bfloat16", "e4m3"): rows, ("bfloat16", "e2m1"): rows})  # (dtype name, fmt)
        _per_token._plans.clear()
        for fmt, g, opts in cases:
            q, sf = kernelkiln.quant.per_token_cast(x, fmt, g, **opts)
            ref = kernelkiln.torch.cast(x, fmt, (1, g), **opts)
            exact = torch.equal(q.view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(sf, ref[1])
            moved = x.numel() * x.element_size() + q.numel() * q.element_size() + sf.numel() * sf.element_size()
            t = graph_time_us(lambda: kernelkiln.quant.per_token_cast(x, fmt, g, **opts))
            rec.append({"name": "per_token_cast", "rows": rows, "fmt": fmt, "g": g, **opts, "time_us": round(t, 2),
                        "pct_of_copy": round(100 * moved / t / 1e3 / ceiling, 1), "bit_exact": exact})
            print(json.dumps(rec[-1]))
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
