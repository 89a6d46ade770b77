"""Benchmarks of the exact scale conversions on the GPU (DeepSeek-V3 sizes): one JSON record per figure.

    python benchmarks/bench_ops_lossless.py --out results.json

per_block_cast_lossless: MXFP4 (1 x 32, fp32 or packed UE8M0 scales) -> e4m3 with (1, 128),
(32, 32) and (128, 128) blocks at T=16384, H=7168 (targets >= 90% of copy bandwidth).
batched_transpose_weight_sf: the fp32 128 x 128 scales of one MoE layer's expert weights
(256 experts: gate/up [2*2048, 7168] as one weight and down [7168, 2048]), bs = 128 (target >= 80%).
Bytes = each input read once + each output written once (docs/SPEC.md §3.2). The copy ceiling
is measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402

import kernelkiln  # noqa: E402


def _mxfp4(t, h, packed):
    data = torch.randint(-128, 128, (t, h // 2), dtype=torch.int16, device="cuda").to(torch.int8)
    e = torch.randint(-10, 0, (t, h // 32), device="cuda")
    if packed:
        b = torch.zeros(t, -(-h // 128) * 4, dtype=torch.uint8, device="cuda")
        b[:, :h // 32] = (e + 127).to(torch.uint8)
        return data, b.view(torch.int32)
    return data, torch.exp2(e.float())


def main():
    args, ceiling = start(__doc__, tokens=16384, hidden=7168, experts=256)
    t, h = args.tokens, args.hidden
    Q = kernelkiln.quant
    records = []
    for packed in (False, True):
        x = _mxfp4(t, h, packed)
        for ob in ((1, 128), (32, 32), (128, 128)):
            q, sf = Q.per_block_cast_lossless(x, "e4m3", (1, 32), ob, packed, True, packed)
            records.append(bandwidth_record(
                "per_block_cast_lossless", dict(T=t, H=h, x_block=[1, 32], out_block=list(ob), packed_ue8m0=packed,
                                                col_major=packed),
                lambda x=x, ob=ob, packed=packed: Q.per_block_cast_lossless(x, "e4m3", (1, 32), ob, packed, True,
                                                                            packed),
                nbytes(x[0], x[1], q, sf), ceiling))
    g, bs = args.experts, 128
    sf = [torch.exp2(torch.randint(-20, 0, (g, 2 * 2048 // bs, h // bs), device="cuda").float()),
          torch.exp2(torch.randint(-20, 0, (g, h // bs, 2048 // bs), device="cuda").float())]
    outs = Q.batched_transpose_weight_sf(sf, bs, [False, True], [None, None])
    moved = nbytes(*sf) + sum(nbytes(*pair) for pair in outs)
    records.append(bandwidth_record(
        "batched_transpose_weight_sf", dict(G=g, weights=[[2 * 2048, h], [h, 2048]], block_size=bs),
        lambda: Q.batched_transpose_weight_sf(sf, bs, [False, True], [None, None]), moved, ceiling))
    records.append(bandwidth_record(
        "batched_transpose_weight_sf_outs", dict(G=g, weights=[[2 * 2048, h], [h, 2048]], block_size=bs),
        lambda: Q.batched_transpose_weight_sf(sf, bs, [False, True], outs), moved, ceiling))
    Q.check_errors()
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
