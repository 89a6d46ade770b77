"""A/B of kernel stores for the Engram gate forward and backward and the small Engram reductions (grad_w_reduce,
engram_sinkhorn_step_reduce, engram_sinkhorn_finalize), timed with whichever store the process loads (the wheel's,
or KERNELKILN_KERNEL_DIR for an experiment store built from the same source with one kernel-internal change). Each
record carries the sha256 of the op's output bytes for seeded inputs, so stores that must agree bit for bit can be
compared across runs.

    KERNELKILN_KERNEL_DIR=<store> python benchmarks/bench_engram_store_ab.py --label rows44 --out ab.json

Run it once per store, alternating (benchmarks/run_store_ab.sh with AB_SCRIPT set to this file). Shapes and bytes
as in bench_ops_engram_gate.py (the backward also with an image-token mask), bench_ops_engram.py and
bench_ops_engram_sinkhorn.py. The forward's persistent-block count follows the store's kernel (how many of its CTAs
an SM holds, from its shared memory and registers in the store's index), so a store whose kernel takes more shared
memory than the wheel's is not timed with a second wave of CTAs; it does not change the results.
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


def _fwd_ctas_per_sm(key):
    """CTAs of the store's gate forward variant ``key`` one SM holds (228 KB of shared memory, 1 KB reserved per CTA;
    64 K registers, allocated per warp in units of 256)."""
    from kernelkiln._runtime import artifacts
    index = json.loads((artifacts.KernelStore().directory / "index.json").read_text())
    arch = "sm_%d%da" % torch.cuda.get_device_capability()
    v = next(v for v in index["variants"] if v["key"] == key and v["arch"] == arch)
    smem = v["spec"]["kernels"][0]["dyn_smem_bytes"]
    regs = -(-next(iter(v["resources"].values()))["registers"] * 32 // 256) * 256
    return min((228 * 1024) // (smem + 1024), 65536 // regs)


GATE_T, GATE_HC, GATE_EPS, GATE_CLAMP = 8192, 4, 1e-20, 1e-6
GATE_HIDDEN = (4096, 2560, 7168)  # --hidden replaces it


def _gate_inputs():
    """(H, x, kv, fused weight, generator) of the gate cases, seeded by H."""
    for h in GATE_HIDDEN:
        g = torch.Generator(device="cuda").manual_seed(h)
        x = torch.randn(GATE_T, GATE_HC, h, device="cuda", generator=g).bfloat16()
        kv = torch.randn(GATE_T, GATE_HC + 1, h, device="cuda", generator=g).bfloat16()
        wf = torch.randn(GATE_HC, h, device="cuda", generator=g).bfloat16().float()
        yield h, x, kv, wf, g


def _gate_fwd(e, ceiling, label):
    from kernelkiln.engram import _engram_gate_fwd as fwd
    out = []
    t, hc, eps, clamp = GATE_T, GATE_HC, GATE_EPS, GATE_CLAMP
    for h, x, kv, wf, _ in _gate_inputs():
        for save in (False, True):
            key = f"engram_gate_fwd(hc_mult={hc},save_for_backward={int(save)},has_image_token_mask=0,inplace=0)"
            per_sm = _fwd_ctas_per_sm(key)
            fwd.gate_fwd_num_blocks = lambda sms, hc_mult, per_sm=per_sm: max(1, sms * per_sm // hc_mult)

            def run(save=save):
                return e.engram_gate_fwd(x, kv, wf, eps, clamp, save)
            res = run()
            digest = _digest(*(r for r in res if r is not None))  # (output, None x 4) without the saved rows
            moved = (x.numel() * 2 + kv.numel()) * 2 + wf.numel() * 4 + (4 * t * hc * 4 if save else 0)
            out.append(bandwidth_record("engram_gate_fwd", {"T": t, "hc": hc, "H": h, "save_for_backward": save,
                                                            "ctas_per_sm": per_sm},
                                        run, moved, ceiling, label=label, digest=digest))
    return out


def _gate_bwd(e, ceiling, label):
    out = []
    t, hc, eps, clamp = GATE_T, GATE_HC, GATE_EPS, GATE_CLAMP
    for h, x, kv, wf, g in _gate_inputs():
        go = torch.randn(t, hc, h, device="cuda", generator=g).bfloat16()
        _, dot, gate, rx, rk = e.engram_gate_fwd(x, kv, wf, eps, clamp)
        masks = {"none": None, "every 7th": torch.arange(t, device="cuda") % 7 == 3}
        for mask_name, mask in masks.items():
            def run(mask=mask):
                return e.engram_gate_bwd(go, x, kv, wf, dot, gate, rx, rk, clamp, image_token_mask=mask)
            digest = _digest(*run())
            moved = (go.numel() * 3 + kv.numel() * 2) * 2 + wf.numel() * 4 + 4 * dot.numel() * 4
            moved += run()[2].numel() * 4  # the partial rows
            out.append(bandwidth_record("engram_gate_bwd", {"T": t, "hc": hc, "H": h, "mask": mask_name}, run,
                                        moved, ceiling, label=label, digest=digest))
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
    for d in (5120, 2560, 256):  # 128, 64 and 32 threads per row (sinkhorn_threads)
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
    # not --rows: benchmarks/run_store_ab.sh passes --rows N for a store folder named *-r<N> (row-count variants of
    # bench_store_ab.py), which must fail here rather than silently shrink the Sinkhorn matrices
    p.add_argument("--sinkhorn-rows", type=int, default=100001, help="rows of the Sinkhorn step / finalize matrices")
    p.add_argument("--only", choices=("gate_fwd", "gate_bwd", "reductions"), help="time one group of ops")
    p.add_argument("--hidden", help="the gate cases' hidden sizes, comma-separated (default 4096,2560,7168); a "
                                    "store whose kernel fixes H must be timed at that H only")
    args = p.parse_args()
    if args.hidden:
        global GATE_HIDDEN
        GATE_HIDDEN = tuple(int(h) for h in args.hidden.split(","))
    ceiling = copy_ceiling_gbs()
    records = [{"name": "copy_ceiling", "label": args.label, "bandwidth_gbs": round(ceiling, 1)}]
    e = kernelkiln.engram
    if args.only in (None, "gate_fwd"):
        try:
            records += _gate_fwd(e, ceiling, args.label)
        except (kernelkiln.MissingSpecializationError, StopIteration) as err:
            print(f"{args.label}: gate fwd skipped ({err!r})", flush=True)
    if args.only in (None, "gate_bwd"):
        try:
            records += _gate_bwd(e, ceiling, args.label)
        except kernelkiln.MissingSpecializationError as err:
            print(f"{args.label}: skipped ({str(err).splitlines()[0]})", flush=True)
    if args.only in (None, "reductions"):
        try:
            records += _grad_w_reduce(e, ceiling, args.label)
        except kernelkiln.MissingSpecializationError as err:  # an experiment store may hold only some ops
            print(f"{args.label}: skipped ({str(err).splitlines()[0]})", flush=True)
        records += _sinkhorn(e, ceiling, args.label, args.sinkhorn_rows)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
