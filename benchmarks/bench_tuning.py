"""Tuning sweep (manifests/experiment-rows.toml): per_token_cast rows per thread, topk_gate round variants.

    TILEKILN_KERNEL_DIR=<store built from the experiment manifest> python benchmarks/bench_tuning.py --out t.json
"""
import argparse
import json

import torch

from bench_foundation import copy_ceiling_gbs, graph_time_us


def main():
    import tilekiln
    from tilekiln.quant import _per_token
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--per-token-cast", action="store_true", help="sweep rows per thread (needs those variants)")
    p.add_argument("--round-impls", default="uniform,sorted")
    args = p.parse_args()
    ceiling = copy_ceiling_gbs()
    T, H = 16384, 7168
    rec = [{"name": "copy_ceiling", "bandwidth_gbs": round(ceiling, 1)}]
    if args.per_token_cast:
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        cases = [("e4m3", 128, {}), ("e4m3", 128, {"round_sf": True, "use_packed_ue8m0": True}),
                 ("e2m1", 32, {}), ("e2m1", 32, {"round_sf": True, "use_packed_ue8m0": True})]
        for rows in (2, 4):
            _per_token.ROWS[torch.bfloat16] = rows
            _per_token._plans.clear()
            for fmt, g, opts in cases:
                q, sf = tilekiln.quant.per_token_cast(x, fmt, g, **opts)
                ref = tilekiln.torch.cast(x, fmt, (1, g), **opts)
                exact = torch.equal(q.view(torch.uint8), ref[0].view(torch.uint8)) and torch.equal(sf, ref[1])
                moved = x.numel() * x.element_size() + q.numel() * q.element_size() + sf.numel() * sf.element_size()
                t = graph_time_us(lambda: tilekiln.quant.per_token_cast(x, fmt, g, **opts))
                rec.append({"name": "per_token_cast", "rows": rows, "fmt": fmt, "g": g, **opts, "time_us": round(t, 2),
                            "pct_of_copy": round(100 * moved / t / 1e3 / ceiling, 1), "bit_exact": exact})
                print(json.dumps(rec[-1]))
    from tilekiln.moe import _topk
    for impl in args.round_impls.split(","):
        _topk.ROUND_IMPL = impl
        _topk._plans.clear()
        for t, k, e in ((16384, 8, 256), (16384, 1, 256), (16384, 32, 256), (128, 8, 256), (16384, 8, 384)):
            s = torch.randn(t, e, device="cuda")
            exact = torch.equal(tilekiln.moe.topk_gate(s, k), tilekiln.torch.stable_topk(s, k))
            rec.append({"name": "topk_gate", "round_impl": impl, "T": t, "E": e, "K": k, "bit_exact": exact,
                        "time_us": round(graph_time_us(lambda: tilekiln.moe.topk_gate(s, k)), 2)})
            print(json.dumps(rec[-1]))
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
