"""Benchmarks of the foundation ops on a GPU; writes one JSON record per figure.

Method (docs/BENCHMARKING.md): device time from CUDA-graph replay of N calls,
median of repetitions, fresh random inputs larger than L2; bytes moved = each
input read once + each output written once; the copy ceiling is measured in
the same run. Host time: wall time per call at T = 128 over thousands of
calls. First call: a fresh process, import + first call + synchronize.

    python benchmarks/bench_foundation.py --out results.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch


# The timer every benchmark shares lives in the package (the pytest benchmark plugin uses it too).
from kernelkiln.testing.timing import event_time_us, graph_time_us  # noqa: E402,F401


def copy_ceiling_gbs(reps=5, calls=10):
    """Device-to-device copy of 1 GiB (bytes read + written), GB/s: median over reps of
    ``calls`` back-to-back copies between CUDA events. (Inside a CUDA graph the copy becomes a
    memcpy node that measured ~2.8 TB/s on the H200, below what kernels reach; events match
    the method of docs/BENCHMARKING.md.)"""
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    speeds = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            b.copy_(a)
        end.record()
        end.synchronize()
        speeds.append(2 * a.numel() * 4 * calls / (start.elapsed_time(end) * 1e-3) / 1e9)
    return statistics.median(speeds)


def host_time_us(fn, calls=5000, reps=5):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(per)


def child_json(script, env=None):
    """Run ``script --child`` in a fresh process; its last stdout line, parsed as JSON (host timings differ
    between processes, so host benchmarks measure in several)."""
    out = subprocess.run([sys.executable, script, "--child"], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_call_s(op):
    prep = ("import torch, time; x = torch.randn(128, 7168, device='cuda', dtype=torch.bfloat16); "
            "s = torch.randn(128, 256, device='cuda'); torch.cuda.synchronize(); t = time.perf_counter(); ")
    call = {"per_token_cast": "import kernelkiln; kernelkiln.quant.per_token_cast(x, 'e4m3', 128)",
            "topk_gate": "import kernelkiln; kernelkiln.moe.topk_gate(s, 8)"}[op]
    code = prep + call + "; torch.cuda.synchronize(); print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                  .stdout.split()[-1]) for _ in range(3)]
    return statistics.median(runs)


def profile_once(name, params, fn):
    """Only under `ncu --profile-from-start off` (scripts/gpu_verify.sh PROFILE_BENCHES sets
    KERNELKILN_PROFILE_LABELS): one warm call of ``fn`` inside a profiled range, after a marker kernel
    (torch's spin_kernel) that lets benchmarks/ncu_summary.py split the report into calls; the call's
    label is appended to $KERNELKILN_PROFILE_LABELS in the same order."""
    labels = os.environ.get("KERNELKILN_PROFILE_LABELS")
    if not labels:
        return
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    torch.cuda._sleep(1)
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    with open(labels, "a") as f:
        f.write(json.dumps({"name": name, "params": params}) + "\n")


def bandwidth_record(name, params, fn, moved, ceiling, **extra):
    """One JSON record of a memory-bound op: device time of ``fn`` (graph replay), ``moved`` bytes, and the
    bandwidth as % of the copy ceiling measured in the same run; printed as it is taken."""
    profile_once(name, params, fn)
    t = graph_time_us(fn)
    bw = moved / (t * 1e-6) / 1e9
    rec = dict(name=name, params=params, time_us=round(t, 2), bytes=moved, bandwidth_gbs=round(bw, 1),
               pct_of_copy=round(100 * bw / ceiling, 1), **{k: v for k, v in extra.items() if v is not None})
    print(json.dumps(rec), flush=True)
    return rec


def per_token_cast_launch(x, q, sf):
    """(the kernel of per_token_cast bf16 -> e4m3, 1 x 128, fp32 row-major scales, and its PrimFunc-ordered
    arguments for x [T, H] into q and sf): what the host-time benchmarks launch directly, bound by name once."""
    from kernelkiln._runtime import store
    from kernelkiln.quant import _per_token
    t, h = x.shape
    rows = _per_token.rows_for("bfloat16", "e4m3")
    values = _per_token.CONTRACT.variant(in_dtype="bfloat16", in_sf_kind="none", fmt="e4m3", num_per_channels=128,
                                         sf_kind="fp32", precomputed=False, rows=rows)
    kernel = store().kernel(_per_token.OP, _per_token.CONTRACT.param_names, values, x.device.index or 0)
    row_blocks, col_blocks = _per_token._grid(t, h, 8, rows)
    args = kernel.bind_named(dict(
        x=x.data_ptr(), out=q.data_ptr(), sf=sf.data_ptr(), num_tokens=t, hidden_div64=h // 64, x_stride_vec=h // 8,
        out_stride_unit=h // 8, sf_stride_t=h // 128, sf_stride_k=1, round_sf=0, write_data=1, clamp_min=1e-4, x_sf=0,
        in_sf_stride_t=0, in_sf_stride_k=0, in_block_m=1, in_block_k=1, num_row_blocks=row_blocks,
        num_col_blocks=col_blocks))
    return kernel, args


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def start(description, **sizes):
    """What every benchmark script begins with: ``--out`` and integer size options (``sizes`` gives their
    defaults), a fixed seed, and the copy ceiling of this run (printed). Returns (args, ceiling GB/s)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", required=True)
    for name, default in sizes.items():
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args()
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbs()
    print(json.dumps({"copy_ceiling_gbs": round(ceiling, 1)}), flush=True)
    return args, ceiling


def write_results(path, ceiling, records):
    """The results file make_results_table.py reads: run metadata, this run's copy ceiling, the records."""
    import kernelkiln
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "driver": kernelkiln._runtime.driver.get_driver().version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "kernelkiln": kernelkiln.__version__, "command": " ".join(sys.argv)}
    with open(path, "w") as f:
        json.dump({"meta": meta, "copy_ceiling_gbs": ceiling, "records": records}, f, indent=1)


def main():
    import kernelkiln
    args, ceiling = start(__doc__, tokens=16384)
    T, H = args.tokens, 7168
    records = []

    def bw_record(name, fn, out, inputs, params):
        records.append(bandwidth_record(name, params, fn, nbytes(*inputs, *out), ceiling))

    def keep(rec):
        records.append(rec)
        print(json.dumps(rec), flush=True)

    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
    for fmt, g, opts in [("e4m3", 128, {}), ("e4m3", 128, {"round_sf": True, "use_packed_ue8m0": True,
                                                           "use_tma_aligned_col_major_sf": True}),
                         ("e2m1", 32, {}), ("e2m1", 32, {"use_e4m3_sf": True}),
                         ("e2m1", 32, {"round_sf": True, "use_packed_ue8m0": True})]:
        out = kernelkiln.quant.per_token_cast(x, fmt, g, **opts)
        bw_record("per_token_cast", lambda: kernelkiln.quant.per_token_cast(x, fmt, g, **opts), out, (x,),
                  {"T": T, "H": H, "in": "bf16", "fmt": fmt, "g": g, **opts})
    x32 = torch.randn(T, H, device="cuda")
    out = kernelkiln.quant.per_token_cast(x32, "e4m3", 128)
    bw_record("per_token_cast", lambda: kernelkiln.quant.per_token_cast(x32, "e4m3", 128), out, (x32,),
              {"T": T, "H": H, "in": "fp32", "fmt": "e4m3", "g": 128})

    for e, k in [(256, 8), (384, 8), (128, 8)]:
        scores = torch.randn(T, e, device="cuda")
        idx = kernelkiln.moe.topk_gate(scores, k)
        bw_record("topk_gate", lambda: kernelkiln.moe.topk_gate(scores, k), (idx,), (scores,),
                  {"T": T, "E": e, "K": k})

    xs = torch.randn(128, H, device="cuda", dtype=torch.bfloat16)
    ss = torch.randn(128, 256, device="cuda")
    keep({"name": "host_time_per_call", "params": {"op": "per_token_cast", "T": 128},
          "time_us": round(host_time_us(lambda: kernelkiln.quant.per_token_cast(xs, "e4m3", 128)), 2)})
    keep({"name": "host_time_per_call", "params": {"op": "topk_gate", "T": 128},
          "time_us": round(host_time_us(lambda: kernelkiln.moe.topk_gate(ss, 8)), 2)})
    keep({"name": "host_time_per_call", "params": {"op": "torch.empty_like (floor)", "T": 128},
          "time_us": round(host_time_us(lambda: torch.empty_like(xs)), 2)})
    for op in ("per_token_cast", "topk_gate"):
        keep({"name": "first_call_fresh_process", "params": {"op": op}, "time_s": round(first_call_s(op), 4)})

    write_results(args.out, ceiling, records)


if __name__ == "__main__":
    main()
