"""E5M6 (v1) benchmarks on the GPU (DeepSeek-V3 sizes): one JSON record per figure.

    python benchmarks/bench_ops_quant_extra.py --out results.json

Figures: per_token_cast(x, 'e5m6', H) from bf16 and fp32 (fp32 and packed UE8M0 scales), and
cast_back(..., x_special_fmt='e5m6') to bf16 and fp32, at T=16384, H=7168. Bytes = each input
read once + each output written once (docs/SPEC.md §3.2: T*H*b + 1.5*T*H + 4T). The copy
ceiling is measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402

import kernelkiln  # noqa: E402


def main():
    args, ceiling = start(__doc__, tokens=16384, hidden=7168)
    t, h = args.tokens, args.hidden
    Q = kernelkiln.quant
    records = []
    x32 = torch.randn(t, h, device="cuda")
    for x in (x32.bfloat16(), x32):
        for packed in (False, True):
            q, sf = Q.per_token_cast(x, "e5m6", h, round_sf=packed, use_packed_ue8m0=packed)
            records.append(bandwidth_record(
                "per_token_cast_e5m6", dict(T=t, H=h, in_dtype=str(x.dtype), round_sf=packed,
                                            use_packed_ue8m0=packed),
                lambda x=x, packed=packed: Q.per_token_cast(x, "e5m6", h, round_sf=packed, use_packed_ue8m0=packed),
                nbytes(x, q, sf), ceiling))
    q, sf = Q.per_token_cast(x32, "e5m6", h)
    for fmt in ("bf16", "fp32"):
        y = Q.cast_back((q, sf), fmt, (1, h), x_special_fmt="e5m6")
        records.append(bandwidth_record(
            "cast_back_e5m6", dict(T=t, H=h, fmt=fmt),
            lambda fmt=fmt: Q.cast_back((q, sf), fmt, (1, h), x_special_fmt="e5m6"), nbytes(q, sf, y), ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
