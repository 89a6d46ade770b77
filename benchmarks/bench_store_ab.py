"""A/B of kernel stores: the foundation's per_token_cast cases, timed with whichever kernel store the process
loads (the wheel's, or KERNELKILN_KERNEL_DIR for an experiment store built from the same source with one
build-time change). Run it once per store, alternating, in one device session, so the stores share the
machine's state; each record carries the label and a bit-exactness check against kernelkiln.torch.

    KERNELKILN_KERNEL_DIR=<store> python benchmarks/bench_store_ab.py --label minb --out ab.json
"""
import argparse
import json

import torch

from bench_foundation import copy_ceiling_gbs, graph_time_us

T, H = 16384, 7168
CASES = (  # (fmt, channels per scale, options): the foundation's bf16 per_token_cast cases, and two e4m3 cases that
    # separate what the fastest one does differently (no IEEE division; column-major scales)
    ("e4m3", 128, {}),
    ("e4m3", 128, {"round_sf": True, "use_packed_ue8m0": True}),
    ("e4m3", 128, {"round_sf": True}),
    ("e4m3", 128, {"use_tma_aligned_col_major_sf": True}),
    ("e2m1", 32, {}),
    ("e2m1", 32, {"use_e4m3_sf": True}),
    ("e2m1", 32, {"round_sf": True, "use_packed_ue8m0": True}),
)


def main():
    import kernelkiln
    p = argparse.ArgumentParser()
    p.add_argument("--label", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=None, help="rows per thread of bf16 input (the store must hold them)")
    args = p.parse_args()
    if args.rows:
        from kernelkiln.quant import _per_token
        _per_token.ROWS.update({("bfloat16", "e4m3"): args.rows, ("bfloat16", "e2m1"): args.rows})
        _per_token._plans.clear()
    torch.manual_seed(0)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    records = [{"name": "copy_ceiling", "label": args.label, "bandwidth_gbs": round(copy_ceiling_gbs(), 1)}]
    ceiling = records[0]["bandwidth_gbs"]
    for fmt, g, opts in CASES:
        try:
            q, sf = kernelkiln.quant.per_token_cast(x, fmt, g, **opts)
        except kernelkiln.MissingSpecializationError:  # an experiment store may hold only some of the cases
            print(f"{args.label}: {fmt} g={g} {opts} not in this store, skipped", flush=True)
            continue
        ref_q, ref_sf = kernelkiln.torch.cast(x, fmt, (1, g), **opts)
        exact = torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)) and torch.equal(
            sf.contiguous().view(torch.uint8), ref_sf.contiguous().view(torch.uint8))
        moved = x.numel() * x.element_size() + q.numel() * q.element_size() + sf.numel() * sf.element_size()
        t = graph_time_us(lambda: kernelkiln.quant.per_token_cast(x, fmt, g, **opts))
        records.append({"name": "per_token_cast", "label": args.label, "rows": args.rows, "fmt": fmt, "g": g, **opts,
                        "time_us": round(t, 2), "pct_of_copy": round(100 * moved / t / 1e3 / ceiling, 1),
                        "bit_exact": exact})
        print(json.dumps(records[-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
