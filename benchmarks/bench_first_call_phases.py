"""Where a fresh process's first call spends its time: import kernelkiln, the kernel lookup (runtime index
parse), the module load (cubin read, sha256, cuModuleLoadData) and the launch + synchronize, for the two
ops of bench_foundation's first-call figure. Each sample is a new process (as bench_foundation's
first_call_s), timed from after torch's CUDA setup, so the phases add up to that figure.

    python benchmarks/bench_first_call_phases.py --runs 5 --out phases.json
"""
import argparse
import json
import statistics
import subprocess
import sys

# Runs in the child: wraps the store's lookup and the module load with timers, then makes the first call.
CHILD = r"""
import json, time, torch
x = torch.randn(128, 7168, device='cuda', dtype=torch.bfloat16)
s = torch.randn(128, 256, device='cuda')
torch.cuda.synchronize()
phases = {}
t0 = time.perf_counter()
import kernelkiln
from kernelkiln._runtime import artifacts, launcher
phases['import_ms'] = (time.perf_counter() - t0) * 1e3

def timed(cls, name, key):
    original = getattr(cls, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            phases[key] = phases.get(key, 0.0) + (time.perf_counter() - t) * 1e3
    setattr(cls, name, wrapper)

timed(artifacts.KernelStore, 'kernel', 'lookup_ms')
timed(launcher.CompiledKernel, '_read_cubin', 'cubin_read_ms')
timed(launcher.CompiledKernel, '_load_locked', 'module_load_ms')  # includes the cubin read
t1 = time.perf_counter()
if OP == 'per_token_cast':
    kernelkiln.quant.per_token_cast(x, 'e4m3', 128)
else:
    kernelkiln.moe.topk_gate(s, 8)
torch.cuda.synchronize()
t2 = time.perf_counter()
phases['first_call_ms'] = (t2 - t1) * 1e3
phases['total_ms'] = (t2 - t0) * 1e3
print(json.dumps(phases))
"""


def sample(op):
    out = subprocess.run([sys.executable, "-c", f"OP = {op!r}\n" + CHILD], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--label", default="")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    records = []
    for op in ("per_token_cast", "topk_gate"):
        runs = [sample(op) for _ in range(args.runs)]
        median = {k: round(statistics.median(r.get(k, 0.0) for r in runs), 2) for k in runs[0]}
        records.append({"name": "first_call_phases", "label": args.label, "op": op, "median_ms": median,
                        "runs": runs})
        print(json.dumps({"op": op, "label": args.label, **median}), flush=True)
    with open(args.out, "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
