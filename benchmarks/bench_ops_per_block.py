"""per_block_cast, cast_back and fake-quant benchmarks on the GPU (DeepSeek-V3 sizes): one JSON record per figure.

    python benchmarks/bench_ops_per_block.py --out results.json

Figures at T=16384, H=7168: per_block_cast bf16 -> e4m3 128x128 and 32x32 (fp32 and packed
UE8M0 scales), bf16 -> e2m1 128x128, fp32 -> e4m3 128x128; cast_back e4m3 1x128 and 128x128
to bf16, e2m1 1x32 to bf16; per_token_cast_and_cast_back bf16 e4m3 g=128. Bytes = each
input read once + each output written once (docs/SPEC.md §3.2; fake quant 2*T*H*b, in place).
The copy ceiling is measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402

import kernelkiln  # noqa: E402
from kernelkiln.torch import cast as ref_cast  # noqa: E402

Q = kernelkiln.quant


def main():
    args, ceiling = start(__doc__, tokens=16384, hidden=7168)
    t, h = args.tokens, args.hidden
    records = []
    x32 = torch.randn(t, h, device="cuda")
    x16 = x32.bfloat16()

    for x, fmt, block, packed in ((x16, "e4m3", (128, 128), False), (x16, "e4m3", (128, 128), True),
                                  (x16, "e4m3", (32, 32), False), (x16, "e4m3", (32, 32), True),
                                  (x16, "e2m1", (128, 128), False), (x32, "e4m3", (128, 128), False)):
        q, sf = Q.per_block_cast(x, fmt, block, round_sf=packed, use_packed_ue8m0=packed)
        records.append(bandwidth_record(
            "per_block_cast", dict(T=t, H=h, in_dtype=str(x.dtype), fmt=fmt, block_size=list(block),
                                   round_sf=packed, use_packed_ue8m0=packed),
            lambda x=x, fmt=fmt, block=block, packed=packed: Q.per_block_cast(x, fmt, block, round_sf=packed,
                                                                              use_packed_ue8m0=packed),
            nbytes(x, q, sf), ceiling))

    for fmt, block, opts in (("e4m3", (1, 128), {}), ("e4m3", (128, 128), {}), ("e4m3", (128, 128), {"round_sf": True,
                             "use_packed_ue8m0": True}), ("e2m1", (1, 32), {"round_sf": True,
                                                                             "use_packed_ue8m0": True})):
        qx = tuple(v.cuda() for v in ref_cast(x32, fmt, block, **opts))
        y = Q.cast_back(qx, "bf16", block)
        records.append(bandwidth_record(
            "cast_back", dict(T=t, H=h, fmt=fmt, x_block_size=list(block), sf_dtype=str(qx[1].dtype), out="bf16"),
            lambda qx=qx, block=block: Q.cast_back(qx, "bf16", block), nbytes(*qx, y), ceiling))

    xf = x16.clone()
    records.append(bandwidth_record(
        "per_token_cast_and_cast_back", dict(T=t, H=h, dtype="torch.bfloat16", fmt="e4m3", num_per_channels=128),
        lambda: Q.per_token_cast_and_cast_back(xf, "e4m3", 128), 2 * nbytes(xf), ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
