"""Benchmarks of the v1 dispatch/combine ops on DeepSeek-V3 shapes; JSON like bench_foundation.

  python benchmarks/bench_ops_fused.py --out results.json

get_fused_mapping (T=16384, K=8, E in {256, 32, 8}, alignment 128, N given: no host sync; target <= 20 us),
expand_to_fused (bf16 and e4m3 + fp32 scales, H=7168), reduce_fused (bf16 -> bf16, bf16 -> e4m3,
e4m3 + x_sf -> e4m3, fp32; H=7168, K=8). Bytes = each input read once + each output written once
(docs/SPEC.md §3.1 (B)); % of the copy ceiling measured in the same run (target >= 85%).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def main():
    import kernelkiln
    moe = kernelkiln.moe
    args, ceiling = start(__doc__, tokens=16384)
    t, k, h = args.tokens, 8, 7168
    records = []

    def record(name, fn, moved, params, target_us=None):
        records.append(bandwidth_record(name, params, fn, moved, ceiling, target_us=target_us))

    def routing(e):
        return torch.stack([torch.randperm(e, device="cuda")[:k] for _ in range(t)]).to(torch.int64) if e >= k \
            else torch.randint(0, e, (t, k), device="cuda")

    for e in (256, 32, 8):
        idx = routing(e)
        n = (t * k + 127 * e + 127) // 128 * 128
        outs = moe.get_fused_mapping(idx, e, n, 128)
        record("get_fused_mapping", lambda idx=idx, e=e, n=n: moe.get_fused_mapping(idx, e, n, 128),
               nbytes(idx, *outs[:7]), {"T": t, "K": k, "E": e, "alignment": 128, "N": n}, target_us=20)

    e = 32
    idx = routing(e)
    p2e, _, _, t2p, *_ = moe.get_fused_mapping(idx, e, 0, 128)
    n = p2e.numel()
    x = torch.randn(t, h, device="cuda").bfloat16()
    y = moe.expand_to_fused(x, t2p, p2e)
    record("expand_to_fused", lambda: moe.expand_to_fused(x, t2p, p2e), nbytes(x, t2p, y),
           {"T": t, "K": k, "H": h, "N": n, "dtype": "bf16"})
    x8 = x.to(torch.float8_e4m3fn)
    sf = torch.rand(t, h // 128, device="cuda")
    y8, ysf = moe.expand_to_fused_with_sf((x8, sf), 128, t2p, p2e)
    record("expand_to_fused_with_sf", lambda: moe.expand_to_fused_with_sf((x8, sf), 128, t2p, p2e),
           nbytes(x8, sf, t2p, y8, ysf), {"T": t, "K": k, "H": h, "N": n, "dtype": "e4m3", "g": 128})

    w = torch.rand(t, k, device="cuda")
    xe = torch.randn(n, h, device="cuda").bfloat16()
    for name, arg, fmt, s in (("bf16", xe, "", None), ("bf16->e4m3", xe, "e4m3", torch.ones(1, device="cuda")),
                              ("e4m3+x_sf->e4m3", (xe.to(torch.float8_e4m3fn), torch.rand(n, device="cuda")), "e4m3",
                               torch.ones(1, device="cuda")),
                              ("fp32", xe.float(), "", None)):
        out = moe.reduce_fused(arg, w, t2p, fmt, s)
        data = arg[0] if isinstance(arg, tuple) else arg
        # rows actually read: T*K (every slot valid here), plus weights, map (and x_sf) and the output
        moved = t * k * h * data.element_size() + nbytes(w, t2p, out) + (4 * t * k if isinstance(arg, tuple) else 0)
        record("reduce_fused", lambda arg=arg, fmt=fmt, s=s: moe.reduce_fused(arg, w, t2p, fmt, s), moved,
               {"T": t, "K": k, "H": h, "N": n, "variant": name})

    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
