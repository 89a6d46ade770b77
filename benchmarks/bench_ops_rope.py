"""Benchmark of transform.apply_rotary on DeepSeek-V4's and the peer's shapes.

  python benchmarks/bench_ops_rope.py --out results.json

Records (T = 16384 tokens, int32 positions): query 128 heads x 64 and key 1 head x 64, interleaved (V4) and NeoX;
128 heads x 128; and the peer's benchmark heads {1, 32, 64, 128} x 64 query only. Bytes = query and key read and
written once, one fp32 cache row and one position per token read; % of the copy ceiling measured in the same run.
The op rotates in place, so every replay rotates the previous result (the time does not depend on the values).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, start, write_results  # noqa: E402


def main():
    import kernelkiln
    args, ceiling = start(__doc__, tokens=16384)
    t, rows = args.tokens, 16384
    records = []
    cases = [(128, 1, 64, True), (128, 1, 64, False), (128, 1, 128, False),
             (1, 0, 64, False), (32, 0, 64, False), (64, 0, 64, False), (128, 0, 64, False)]
    for heads, key_heads, d, interleaved in cases:
        ang = torch.rand(rows, d // 2, device="cuda") * 6.283
        cache = torch.cat((ang.cos(), ang.sin()), dim=1)
        q = torch.randn(t, heads, d, device="cuda").to(torch.bfloat16)
        k = torch.randn(t, key_heads, d, device="cuda").to(torch.bfloat16) if key_heads else None
        pos = torch.randint(0, rows, (t,), device="cuda", dtype=torch.int32)

        def fn(q=q, k=k, cache=cache, pos=pos, interleaved=interleaved):
            kernelkiln.transform.apply_rotary(q, cache, k, pos, interleaved)

        moved = 2 * (q.numel() + (k.numel() if k is not None else 0)) * 2 + t * (d * 4 + 4)
        records.append(bandwidth_record("apply_rotary", {"T": t, "heads": heads, "key_heads": key_heads, "D": d,
                                                         "interleaved": interleaved, "dtype": "bfloat16"},
                                        fn, moved, ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
