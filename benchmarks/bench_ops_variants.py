"""Benchmarks of the exported ops the family scripts do not time: the sf-only / precomputed-scale variants,
per_token_cast_back, the router backward and the v1 auxiliary MoE ops, so that every operator of the quant and
MoE families has a committed figure. JSON like bench_foundation.

    python benchmarks/bench_ops_variants.py --out results.json

Kernel ops: CUDA-graph replay (bench_foundation.bandwidth_record). The v1 auxiliary ops are compositions of
torch ops (moe/_aux.py); some (bincount) synchronize with the host and cannot be graph-captured, so they are
timed as back-to-back calls between CUDA events ("method": "events"), which includes their launch gaps.
"""
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, nbytes, start, write_results  # noqa: E402


def event_time_us(fn, calls=20, reps=15):
    """Median time per call of ``calls`` back-to-back calls between two CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def main():
    import tilekiln
    Q, M = tilekiln.quant, tilekiln.moe
    args, ceiling = start(__doc__, tokens=16384)
    T, H, E, K = args.tokens, 7168, 256, 8
    records = []

    def graph_case(name, params, fn, moved):
        try:
            records.append(bandwidth_record(name, params, fn, moved, ceiling))
        except Exception as e:  # one broken case must not hide the others' figures
            records.append({"name": name, "params": params, "error": f"{type(e).__name__}: {e}"})
            print(json.dumps(records[-1]), flush=True)

    def event_case(name, params, fn, moved):
        try:
            t = event_time_us(fn)
            rec = dict(name=name, params=params, time_us=round(t, 2), bytes=moved, method="events",
                       pct_of_copy=round(100 * moved / (t * 1e-6) / 1e9 / ceiling, 1))
        except Exception as e:
            rec = {"name": name, "params": params, "error": f"{type(e).__name__}: {e}"}
        records.append(rec)
        print(json.dumps(rec), flush=True)

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
    event_case("group_count", {"T": T, "E": E, "K": K}, lambda: M.group_count(idx, E), nbytes(idx))
    event_case("aux_fi", {"T": T, "E": E, "K": K}, lambda: M.aux_fi(idx, E, K), nbytes(idx))
    event_case("mask_indices_by_tp", {"T": T, "E": E, "K": K, "ep": 8, "tp": 2},
               lambda: M.mask_indices_by_tp(idx, E, 8, 1, 2), 2 * nbytes(idx))
    groups = idx // 32
    event_case("inplace_unique_group_indices", {"T": T, "K": K, "groups": 8},
               lambda: M.inplace_unique_group_indices(groups, 8), 2 * nbytes(groups))
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
