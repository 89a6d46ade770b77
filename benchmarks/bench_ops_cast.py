"""quant.cast and per_channel_cast benchmarks on the GPU (DeepSeek-V3 sizes): one JSON record per figure.

    python benchmarks/bench_ops_cast.py --out results.json

Figures: cast fp32 -> bf16 (RNE and stochastic), fp32 -> e4m3 stochastic, bf16 -> e4m3
stochastic, and per_channel_cast bf16 gm=128 (fp32 and packed UE8M0 scales), at
T=16384, H=7168. Bytes = each input read once + each output written once
(docs/SPEC.md §3.2: cast n*(b_in + b_out); per_channel_cast T*H*b_in + T*H + (T/gm)*H*s).
The copy ceiling is measured in the same run.
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
    records = []
    x32 = torch.randn(t, h, device="cuda")
    x16 = x32.bfloat16()
    for src, dst, sr in ((x32, torch.bfloat16, False), (x32, torch.bfloat16, True),
                         (x32, torch.float8_e4m3fn, True), (x16, torch.float8_e4m3fn, True)):
        y = kernelkiln.quant.cast(src, dst, sr)
        records.append(bandwidth_record(
            "cast", dict(T=t, H=h, in_dtype=str(src.dtype), out_dtype=str(dst), stochastic_rounding=sr),
            lambda src=src, dst=dst, sr=sr: kernelkiln.quant.cast(src, dst, sr), nbytes(src, y), ceiling))
    for packed in (False, True):
        q, sf = kernelkiln.quant.per_channel_cast(x16, "e4m3", 128, round_sf=packed, use_packed_ue8m0=packed)
        records.append(bandwidth_record(
            "per_channel_cast", dict(T=t, H=h, in_dtype="torch.bfloat16", num_per_tokens=128, round_sf=packed,
                                     use_packed_ue8m0=packed),
            lambda packed=packed: kernelkiln.quant.per_channel_cast(x16, "e4m3", 128, round_sf=packed,
                                                                  use_packed_ue8m0=packed),
            nbytes(x16, q, sf), ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
