"""RMSNorm benchmarks on the GPU (DeepSeek-V3 sizes): one JSON record per figure.

    python benchmarks/bench_ops_norm.py --out results.json

Bytes = each input read once + each output written once (docs/SPEC.md §3.2 row formulas);
the norm_backward figure counts its weight-gradient scratch too (2 * P * H * 4 bytes), as
a note in the record, but not in ``bytes``.
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
    x = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    r = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(h, device="cuda")).to(torch.bfloat16)
    q = kernelkiln.quant

    out, rstd, _ = q.norm_forward(x, w, 1e-6, with_rstd=True)
    records.append(bandwidth_record("norm_forward", dict(T=t, H=h, dtype="bf16", residual=False),
                           lambda: q.norm_forward(x, w, 1e-6), nbytes(x, w, out), ceiling))
    out, _, ro = q.norm_forward(x, w, 1e-6, residual=r)
    records.append(bandwidth_record("norm_forward", dict(T=t, H=h, dtype="bf16", residual=True),
                           lambda: q.norm_forward(x, w, 1e-6, residual=r), nbytes(x, r, w, out, ro), ceiling))
    for packed in (False, True):
        (qq, sf), _, _, _ = q.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, round_sf=True,
                                                              use_packed_ue8m0=packed)
        records.append(bandwidth_record(
            "norm_forward_and_per_token_cast", dict(T=t, H=h, dtype="bf16", fmt="e4m3", g=32, round_sf=True,
                                                    packed_ue8m0=packed, residual=False),
            lambda packed=packed: q.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, round_sf=True,
                                                                    use_packed_ue8m0=packed),
            nbytes(x, w, qq, sf), ceiling))
    # + the MegaMoE copy of the packed scales (a separate scatter here; its bytes counted as written once)
    mega = torch.zeros((t, h // 128), dtype=torch.int32, device="cuda")
    (qq, sf), _, _, _ = q.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, round_sf=True,
                                                          use_packed_ue8m0=True, mega_moe_sf=mega, mega_moe_block_m=128)
    records.append(bandwidth_record(
        "norm_forward_and_per_token_cast", dict(T=t, H=h, dtype="bf16", fmt="e4m3", g=32, round_sf=True,
                                                packed_ue8m0=True, residual=False, mega_moe_block_m=128),
        lambda: q.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, round_sf=True, use_packed_ue8m0=True,
                                                  mega_moe_sf=mega, mega_moe_block_m=128),
        nbytes(x, w, qq, sf, mega), ceiling))
    (qq, sf), ob, _, ro = q.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, residual=r, with_out_bf16=True)
    records.append(bandwidth_record(
        "norm_forward_and_per_token_cast", dict(T=t, H=h, dtype="bf16", fmt="e4m3", g=32, residual=True,
                                                with_out_bf16=True),
        lambda: q.norm_forward_and_per_token_cast(x, w, 1e-6, "e4m3", 32, residual=r, with_out_bf16=True),
        nbytes(x, r, w, qq, sf, ob, ro), ceiling))

    dy = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    rstd = torch.rand(t, device="cuda") + 0.5
    wg = torch.zeros(h, dtype=torch.float32, device="cuda")
    dx, _ = q.norm_backward(dy, x, w, rstd, weight_grad=wg)
    p = q.norm_backward_num_partials(torch.bfloat16)
    records.append(bandwidth_record(
        "norm_backward", dict(T=t, H=h, dtype="bf16", weight_grad="fp32 accumulate", partials=p),
        lambda: q.norm_backward(dy, x, w, rstd, weight_grad=wg),
        nbytes(dy, x, w, rstd, dx) + 2 * wg.numel() * 4, ceiling,
        note=f"plus {2 * p * h * 4} bytes of fp32 partial scratch (written and read once), not counted"))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
