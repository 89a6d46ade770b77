"""Benchmark of engram.engram_gate_fwd and engram.engram_gate_bwd on the Engram model's shapes.

  python benchmarks/bench_ops_engram_gate.py --out results.json

Records (T = 8192 tokens, hc 4, H in {4096, 2560, 7168}): the forward with and without the saved tensors, in place,
and the backward. Bytes = every tensor the op must read and write once (the forward reads x, kv and the fused weight
and writes the output and the saved [T, hc] rows; the backward reads grad_out, x, kv, the weight and the four saved
rows and writes grad_x, grad_kv and the [SMs, hc, H] partials); % of the copy ceiling measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def main():
    import kernelkiln
    from kernelkiln.engram import engram_gate_bwd, engram_gate_fwd
    args, ceiling = start(__doc__, tokens=8192)
    t, hc, eps, clamp = args.tokens, 4, 1e-20, 1e-6
    records = []
    for h in (4096, 2560, 7168):
        x = torch.randn(t, hc, h, device="cuda").to(torch.bfloat16)
        kv = torch.randn(t, hc + 1, h, device="cuda").to(torch.bfloat16)
        wf = torch.randn(hc, h, device="cuda").to(torch.bfloat16).float()
        out, dot, g, rx, rk = engram_gate_fwd(x, kv, wf, eps, clamp)
        saved = 4 * nbytes(dot)
        base = {"T": t, "hc": hc, "H": h}
        for save in (True, False):
            records.append(bandwidth_record("engram_gate_fwd", {**base, "save_for_backward": save, "inplace": False},
                                            lambda save=save: engram_gate_fwd(x, kv, wf, eps, clamp, save),
                                            nbytes(x, kv, wf) + nbytes(x) + (saved if save else 0), ceiling))
        xi = x.clone()  # each replay gates the previous result: the time does not depend on the values
        records.append(bandwidth_record("engram_gate_fwd", {**base, "save_for_backward": False, "inplace": True},
                                        lambda: engram_gate_fwd(xi, kv, wf, eps, clamp, False, inplace=True),
                                        nbytes(x, kv, wf) + nbytes(x), ceiling))
        go = torch.randn_like(x)
        partials = kernelkiln.config.get_num_sms() * hc * h * 4
        records.append(bandwidth_record("engram_gate_bwd", base,
                                        lambda: engram_gate_bwd(go, x, kv, wf, dot, g, rx, rk, clamp),
                                        nbytes(go, x, kv, wf) + saved + nbytes(x, kv) + partials, ceiling))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
