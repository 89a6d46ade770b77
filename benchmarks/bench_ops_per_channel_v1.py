"""v1 per-channel benchmarks on the GPU (DeepSeek-V3 sizes): one JSON record per figure.

    python benchmarks/bench_ops_per_channel_v1.py --out results.json

Figures: per_channel_cast_and_transpose at T=16384, H=7168 and
swiglu_forward_and_per_channel_cast_and_transpose at T=16384, I=2048 (x [T, 4096]), for
gm in {32, 128}, round_sf on, transposed and not (swiglu), clamp 10. Bytes = each input read
once + each output written once (docs/SPEC.md §3.2: 2TH + TH + 4(T/gm)H, and
T*2I*2 + T*I + 4(T/gm)I). Also per_channel_cast_fused (bf16 input, and FP8 1x128 input with its
fp32 scales; without and with a pos_to_token gather of T rows in random order) and the FP8-input
per_channel_cast (1x128 scales, gm=128). The copy ceiling is measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402

import kernelkiln  # noqa: E402


def main():
    args, ceiling = start(__doc__, tokens=16384, hidden=7168, inter=2048)
    t, h, i = args.tokens, args.hidden, args.inter
    Q = kernelkiln.quant
    records = []
    x = torch.randn(t, h, device="cuda").bfloat16()
    xs = torch.randn(t, 2 * i, device="cuda").bfloat16()
    for gm in (32, 128):
        q, sf = Q.per_channel_cast_and_transpose(x, "e4m3", gm, round_sf=True)
        records.append(bandwidth_record(
            "per_channel_cast_and_transpose", dict(T=t, H=h, gm=gm, round_sf=True),
            lambda gm=gm: Q.per_channel_cast_and_transpose(x, "e4m3", gm, round_sf=True),
            nbytes(x, q, sf), ceiling))
        for without_transpose in (False, True):
            kw = dict(round_sf=True, without_transpose=without_transpose, swiglu_clamp_value=10.0)
            q, sf = Q.swiglu_forward_and_per_channel_cast_and_transpose(xs, "e4m3", gm, **kw)
            records.append(bandwidth_record(
                "swiglu_forward_and_per_channel_cast_and_transpose",
                dict(T=t, I=i, gm=gm, round_sf=True, without_transpose=without_transpose, clamp=10.0),
                lambda gm=gm, kw=kw: Q.swiglu_forward_and_per_channel_cast_and_transpose(xs, "e4m3", gm, **kw),
                nbytes(xs, q, sf), ceiling))
    # FP8 1x128 per-token input (data + fp32 scales), as a forward pass hands it to the weight gradient.
    x8, x8_sf = kernelkiln.quant.per_token_cast(x, "e4m3", 128)
    pos = torch.randperm(t, device="cuda", dtype=torch.int32)
    for name, xin, g in (("bf16", x, None), ("e4m3 1x128", (x8, x8_sf), 128)):
        for gather in (None, pos):
            q, sf = Q.per_channel_cast_fused(xin, "e4m3", 128, round_sf=True, num_per_channels=g, pos_to_token=gather)
            ins = (x,) if g is None else (x8, x8_sf)
            records.append(bandwidth_record(
                "per_channel_cast_fused", dict(T=t, H=h, input=name, gather=gather is not None, round_sf=True),
                lambda xin=xin, g=g, gather=gather: Q.per_channel_cast_fused(
                    xin, "e4m3", 128, round_sf=True, num_per_channels=g, pos_to_token=gather),
                nbytes(*ins, *(() if gather is None else (gather,)), q, sf), ceiling))
    q, sf = Q.per_channel_cast((x8, x8_sf), "e4m3", 128, round_sf=True, num_per_channels=128)
    records.append(bandwidth_record(
        "per_channel_cast", dict(T=t, H=h, input="e4m3 1x128", gm=128, round_sf=True),
        lambda: Q.per_channel_cast((x8, x8_sf), "e4m3", 128, round_sf=True, num_per_channels=128),
        nbytes(x8, x8_sf, q, sf), ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
