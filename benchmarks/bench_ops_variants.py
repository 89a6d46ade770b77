"""Benchmarks of the exported ops the family scripts do not time: the sf-only / precomputed-scale variants,
per_token_cast_back, the router backward and the v1 auxiliary MoE ops, so that every operator of the quant and
MoE families has a committed figure. JSON like bench_foundation.

    python benchmarks/bench_ops_variants.py --out results.json

Every case: CUDA-graph replay (bench_foundation.bandwidth_record). group_count and aux_fi include the zeroing
of their count buffer (one memset node), as a call does; inplace_unique_group_indices rewrites its input in
place, so after the first replay it finds nothing new to clear; its bytes are the spec's read-modify-write
minimum (16·T·K) either way.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def main():
    import kernelkiln
    Q, M = kernelkiln.quant, kernelkiln.moe
    args, ceiling = start(__doc__, tokens=16384)
    T, H, E, K = args.tokens, 7168, 256, 8
    records = []

    def graph_case(name, params, fn, moved):
        try:
            records.append(bandwidth_record(name, params, fn, moved, ceiling))
        except Exception as e:  # one broken case must not hide the others' figures
            records.append({"name": name, "params": params, "error": f"{type(e).__name__}: {e}"})
            print(json.dumps(records[-1]), flush=True)

    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    sf = Q.per_token_cast_with_sf_only(x, "e4m3", 128)
    graph_case("per_token_cast_with_sf_only", {"T": T, "H": H, "fmt": "e4m3", "g": 128},
               lambda: Q.per_token_cast_with_sf_only(x, "e4m3", 128), nbytes(x, sf))
    q = Q.per_token_cast_with_precomputed_sf(x, "e4m3", 128, sf)
    graph_case("per_token_cast_with_precomputed_sf", {"T": T, "H": H, "fmt": "e4m3", "g": 128},
               lambda: Q.per_token_cast_with_precomputed_sf(x, "e4m3", 128, sf), nbytes(x, sf, q))
    bsf = Q.per_block_cast_with_sf_only(x, "e4m3", (128, 128))
    graph_case("per_block_cast_with_sf_only", {"T": T, "H": H, "fmt": "e4m3", "block": [128, 128]},
               lambda: Q.per_block_cast_with_sf_only(x, "e4m3", (128, 128)), nbytes(x, bsf))
    bq = Q.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), bsf)
    graph_case("per_block_cast_with_precomputed_sf", {"T": T, "H": H, "fmt": "e4m3", "block": [128, 128]},
               lambda: Q.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), bsf), nbytes(x, bsf, bq))
    pq = Q.per_token_cast(x, "e4m3", 128)
    back = Q.per_token_cast_back(pq, "bf16", 128)
    graph_case("per_token_cast_back", {"T": T, "H": H, "fmt": "e4m3", "g": 128, "out": "bf16"},
               lambda: Q.per_token_cast_back(pq, "bf16", 128), nbytes(*pq, back))

    logits = torch.randn(T, E, device="cuda")
    scores = torch.empty(T, E, device="cuda")
    idx, w = M.moe_topk_gate_forward(logits, K, False, 0, 2.5, 0, scores=scores)
    grad_w = torch.randn(T, K, device="cuda")
    grad = M.moe_topk_gate_backward(scores, idx, w, grad_w, 2.5)
    graph_case("moe_topk_gate_backward", {"T": T, "E": E, "K": K},
               lambda: M.moe_topk_gate_backward(scores, idx, w, grad_w, 2.5), nbytes(scores, idx, w, grad_w, grad))
    graph_case("moe_topk_gate (v1 name of moe_topk_gate_forward)", {"T": T, "E": E, "K": K},
               lambda: M.moe_topk_gate(logits, K, False, 0, 2.5, 0), nbytes(logits, idx, w))
    counts = M.group_count(idx, E)
    graph_case("group_count", {"T": T, "E": E, "K": K}, lambda: M.group_count(idx, E), nbytes(idx, counts))
    graph_case("aux_fi", {"T": T, "E": E, "K": K}, lambda: M.aux_fi(idx, E, K), nbytes(idx, counts, counts))
    graph_case("mask_indices_by_tp", {"T": T, "E": E, "K": K, "ep": 8, "tp": 2},
               lambda: M.mask_indices_by_tp(idx, E, 8, 1, 2), 2 * nbytes(idx))
    groups = idx // 32
    graph_case("inplace_unique_group_indices", {"T": T, "K": K, "groups": 8},
               lambda: M.inplace_unique_group_indices(groups, 8), 2 * nbytes(groups))  # docs/SPEC.md: 16TK (RMW)
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
