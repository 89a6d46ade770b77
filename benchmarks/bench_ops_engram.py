"""Benchmark of engram_hash, fused_weight, grad_w_reduce and the Engram gate layer (forward + backward).

  python benchmarks/bench_ops_engram.py --out results.json

Records: engram_hash at 16384 tokens, n 3, L 2, M 8 (the target shape, a latency figure) and 8192 tokens with an
image-token mask; fused_weight and grad_w_reduce at hc 4 and H 2560 / 4096 / 7168 with P = the SM count (the
gate backward's partial count); the layer's forward and forward + backward at 8192 tokens, hc 4, H 4096. Bytes =
every input read and every output written once (grad_w_reduce reads and writes its accumulators); % of the copy
ceiling measured in the same run.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, start, write_results  # noqa: E402


def _hash_records(kernelkiln, ceiling):
    from kernelkiln.torch import make_offsets
    out = []
    for t, masked in ((16384, False), (8192, True)):
        n, layers, m = 3, 2, 8
        ids = torch.randint(0, 129280, (t, n), device="cuda", dtype=torch.int32)
        mult = torch.randint(1, 2**40, (layers, n), device="cuda", dtype=torch.int64)
        vocab = torch.randint(1000, 5 * 129280, (layers, n - 1, m), device="cuda", dtype=torch.int32)
        off = make_offsets(vocab)
        mask = torch.rand(t, device="cuda") < 0.1 if masked else None

        def fn(ids=ids, mult=mult, vocab=vocab, off=off, mask=mask):
            kernelkiln.engram.engram_hash(ids, mult, vocab, off, mask)

        moved = ids.numel() * 4 + layers * t * (n - 1) * m * 4 + (t if masked else 0)
        out.append(bandwidth_record("engram_hash", {"T": t, "n": n, "L": layers, "M": m, "mask": masked}, fn, moved,
                                    ceiling))
    return out


def _weight_records(kernelkiln, ceiling):
    out = []
    p = torch.cuda.get_device_properties(0).multi_processor_count
    for h in (2560, 4096, 7168):
        hc = 4
        wh, we = torch.randn(hc, h, device="cuda").bfloat16(), torch.randn(hc, h, device="cuda").bfloat16()
        out.append(bandwidth_record("fused_weight", {"hc": hc, "H": h},
                                    lambda wh=wh, we=we: kernelkiln.engram.fused_weight(wh, we),
                                    hc * h * (2 + 2 + 4), ceiling))
        part, gh, ge = torch.randn(p, hc, h, device="cuda"), torch.zeros(hc, h, device="cuda"), torch.zeros(
            hc, h, device="cuda")
        out.append(bandwidth_record("grad_w_reduce", {"P": p, "hc": hc, "H": h},
                                    lambda part=part, wh=wh, we=we, gh=gh, ge=ge: kernelkiln.engram.grad_w_reduce(
                                        part, wh, we, gh, ge),
                                    (p * hc * h * 4) + hc * h * (2 + 2 + 4 * 4), ceiling))
    return out


def _layer_records(kernelkiln, ceiling):
    t, hc, h = 8192, 4, 4096
    x = torch.randn(t, hc, h, device="cuda").bfloat16().requires_grad_()
    kv = torch.randn(t, (hc + 1) * h, device="cuda").bfloat16().requires_grad_()
    wh = (torch.randn(hc, h, device="cuda") * 0.1 + 1).bfloat16().requires_grad_()
    we = (torch.randn(hc, h, device="cuda") * 0.1 + 1).bfloat16().requires_grad_()
    go = torch.randn(t, hc, h, device="cuda").bfloat16()
    gate = kernelkiln.modeling.engram.engram_gate

    def fwd():
        with torch.no_grad():
            gate(x, kv, wh, we, 1e-6, 1e-20, None)

    def fwd_bwd():
        out = gate(x, kv, wh, we, 1e-6, 1e-20, None)
        torch.autograd.grad(out, (x, kv, wh, we), go)

    fwd_bytes = (x.numel() + kv.numel() + x.numel()) * 2 + t * hc * 16
    bwd_bytes = (go.numel() + x.numel() + kv.numel() + x.numel() + kv.numel()) * 2 + t * hc * 16
    shape = {"T": t, "hc": hc, "H": h}
    return [bandwidth_record("engram_gate_layer_fwd", shape, fwd, fwd_bytes, ceiling),
            bandwidth_record("engram_gate_layer_fwd_bwd", shape, fwd_bwd, fwd_bytes + bwd_bytes, ceiling)]


def main():
    import kernelkiln
    import kernelkiln.modeling  # noqa: F401
    args, ceiling = start(__doc__, tokens=16384)
    records = _hash_records(kernelkiln, ceiling) + _weight_records(kernelkiln, ceiling) + _layer_records(kernelkiln,
                                                                                                     ceiling)
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
