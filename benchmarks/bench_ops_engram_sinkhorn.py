"""Benchmark of the Engram Sinkhorn optimizer ops at the largest shapes of the peer's tests.

  python benchmarks/bench_ops_engram_sinkhorn.py --out results.json

Records: momentum update over 1000001 * 512 elements (bf16 grad + fp32 momentum, and fp32 + fp32; Nesterov and
not), step and finalize on 100001 rows x head dim {256, 5120} fp32, step_reduce over 3 * SMs partial rows x
{256, 5120}. Bytes = each input read once and each output written once (in-place buffers twice); % of the copy
ceiling measured in the same run. The step updates row_scale in place, so each replay normalizes the previous
result (the time does not depend on the values).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, start, write_results  # noqa: E402


def main():
    import kernelkiln
    from kernelkiln import config
    e = kernelkiln.engram
    args, ceiling = start(__doc__, rows=100001, numel=1000001 * 512)
    records = []
    n = args.numel
    for gdt, mdt in ((torch.bfloat16, torch.float32), (torch.float32, torch.float32)):
        for nesterov in (True, False):
            grad = torch.randn(n, device="cuda").to(gdt)
            mom = torch.randn(n, device="cuda").to(mdt)

            def fn(grad=grad, mom=mom, nesterov=nesterov):
                e.engram_sinkhorn_momentum_update(grad, mom, 0.95, nesterov)

            moved = n * (grad.element_size() + 2 * mom.element_size() + 4)
            records.append(bandwidth_record("engram_sinkhorn_momentum_update",
                                            {"numel": n, "grad_dtype": str(gdt)[6:], "momentum_dtype": str(mdt)[6:],
                                             "nesterov": nesterov}, fn, moved, ceiling))
        del grad, mom
    rows, parts = args.rows, 3 * config.get_num_sms()
    for d in (256, 5120):
        matrix = torch.randn(rows, d, device="cuda")
        row_scale, col_scale = torch.rand(rows, device="cuda"), torch.rand(d, device="cuda")

        def step(matrix=matrix, row_scale=row_scale, col_scale=col_scale):
            e.engram_sinkhorn_step(matrix, row_scale, col_scale, 1e-20)

        moved = rows * d * 4 + rows * 4 * 3 + d * 4 + parts * d * 4
        records.append(bandwidth_record("engram_sinkhorn_step", {"num_rows": rows, "head_dim": d, "partials": parts},
                                        step, moved, ceiling))
        partial, col_sumsq = torch.rand(parts, d, device="cuda"), torch.empty(d, device="cuda")

        def reduce(partial=partial, col_sumsq=col_sumsq):
            e.engram_sinkhorn_step_reduce(partial, col_sumsq)

        records.append(bandwidth_record("engram_sinkhorn_step_reduce", {"partials": parts, "head_dim": d}, reduce,
                                        parts * d * 4 + d * 4, ceiling))
        out = torch.empty_like(matrix)

        def finalize(matrix=matrix, row_scale=row_scale, col_scale=col_scale, out=out, d=d):
            e.engram_sinkhorn_finalize(matrix, row_scale, col_scale, 1e-20, d ** 0.5, out=out)

        records.append(bandwidth_record("engram_sinkhorn_finalize", {"num_rows": rows, "head_dim": d}, finalize,
                                        2 * rows * d * 4 + rows * 4 + d * 4, ceiling))
        del matrix, out
    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
