"""A/B of kernel stores for the small Engram reductions (grad_w_reduce, engram_sinkhorn_step_reduce,
engram_sinkhorn_finalize), timed with whichever store the process loads (the wheel's, or KERNELKILN_KERNEL_DIR for an
experiment store built from the same source with one kernel-internal change). Each record carries the sha256 of the
op's output bytes for seeded inputs, so stores that must agree bit for bit can be compared across runs.

    KERNELKILN_KERNEL_DIR=<store> python benchmarks/bench_engram_store_ab.py --label rows44 --out ab.json

Run it once per store, alternating (benchmarks/run_store_ab.sh with AB_SCRIPT set to this file). Shapes and bytes
as in bench_ops_engram.py and bench_ops_engram_sinkhorn.py.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import bandwidth_record, copy_ceiling_gbs  # noqa: E402


def _digest(*ts):
    h = hashlib.sha256()
    for t in ts:
        h.update(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _grad_w_reduce(e, ceiling, label):
    out = []
    p = torch.cuda.get_device_properties(0).multi_processor_count
    for h in (7168, 4096, 2560):
        hc = 4
        g = torch.Generator(device="cuda").manual_seed(h)
        wh = torch.randn(hc, h, device="cuda", generator=g).bfloat16()
        we = torch.randn(hc, h, device="cuda", generator=g).bfloat16()
        part = torch.randn(p, hc, h, device="cuda", generator=g)
        gh, ge = torch.zeros(hc, h, device="cuda"), torch.zeros(hc, h, device="cuda")
        e.grad_w_reduce(part, wh, we, gh, ge)
        digest = _digest(gh, ge)
        out.append(bandwidth_record("grad_w_reduce", {"P": p, "hc": hc, "H": h},
                                    lambda part=part, wh=wh, we=we, gh=gh, ge=ge: e.grad_w_reduce(part, wh, we, gh, ge),
                                    (p * hc * h * 4) + hc * h * (2 + 2 + 4 * 4), ceiling, label=label, digest=digest))
    return out


def _try(records, label, fn):
    """Append fn()'s record unless the store lacks the op (an experiment store may hold only some ops)."""
    import kernelkiln
    try:
        records.append(fn())
    except kernelkiln.MissingSpecializationError as err:
        print(f"{label}: skipped ({str(err).splitlines()[0]})", flush=True)


def _sinkhorn(e, ceiling, label, rows):
    out = []
    parts = 3 * torch.cuda.get_device_properties(0).multi_processor_count
    for d in (5120, 256):
        g = torch.Generator(device="cuda").manual_seed(d)
        partial, col_sumsq = torch.rand(parts, d, device="cuda", generator=g), torch.empty(d, device="cuda")

        def reduce_record(partial=partial, c=col_sumsq, d=d):
            e.engram_sinkhorn_step_reduce(partial, c)
            return bandwidth_record("engram_sinkhorn_step_reduce", {"partials": parts, "head_dim": d},
                                    lambda: e.engram_sinkhorn_step_reduce(partial, c), parts * d * 4 + d * 4, ceiling,
                                    label=label, digest=_digest(c))
        _try(out, label, reduce_record)
        matrix = torch.randn(rows, d, device="cuda", generator=g)
        row_scale, col_scale = torch.rand(rows, device="cuda", generator=g), torch.rand(d, device="cuda", generator=g)
        res = torch.empty_like(matrix)

        def finalize(matrix=matrix, row_scale=row_scale, col_scale=col_scale, res=res, d=d):
            e.engram_sinkhorn_finalize(matrix, row_scale, col_scale, 1e-20, d ** 0.5, out=res)

        def finalize_record(res=res, d=d, finalize=finalize):
            finalize()
            return bandwidth_record("engram_sinkhorn_finalize", {"num_rows": rows, "head_dim": d}, finalize,
                                    2 * rows * d * 4 + rows * 4 + d * 4, ceiling, label=label, digest=_digest(res))
        _try(out, label, finalize_record)
        del matrix, res
    return out


def main():
    import kernelkiln
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="wheel")
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=100001)
    args = p.parse_args()
    ceiling = copy_ceiling_gbs()
    records = [{"name": "copy_ceiling", "label": args.label, "bandwidth_gbs": round(ceiling, 1)}]
    e = kernelkiln.engram
    try:
        records += _grad_w_reduce(e, ceiling, args.label)
    except kernelkiln.MissingSpecializationError as err:  # an experiment store may hold only some ops
        print(f"{args.label}: skipped ({str(err).splitlines()[0]})", flush=True)
    records += _sinkhorn(e, ceiling, args.label, args.rows)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
