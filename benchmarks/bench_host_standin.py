"""Host time per call on a machine without a GPU: the runtime's Python and the native shim against a no-op driver.

The launch recorder's stand-in CUDA environment (tests/launch_record/recorder.py) with ``cuLaunchKernelEx`` replaced
by a C function that returns at once, so a call costs what the runtime itself costs: checks, plan lookup, output
allocation (CPU tensors here), argument packing and the shim. Used for A/Bs of runtime changes, e.g. the redesign's
launches by name against the tree before it:

    python benchmarks/bench_host_standin.py --a /path/to/old/python:tilekiln --b python:kernelkiln \\
        --store STORE --rounds 3 --out results.json

Each round runs one fresh process per tree (A then B, then B then A in the next round), each timing the parts
interleaved; the figure is the median over repetitions of the mean over ``--calls`` calls.
"""
import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOOP_C = "int tk_noop_launch(const void *c, void *f, void **p, void **e) { (void)c; (void)f; (void)p; (void)e; " \
         "return 0; }\n"


def _build(tmp):
    so_shim, so_noop = Path(tmp) / "shim.so", Path(tmp) / "noop.so"
    (Path(tmp) / "noop.c").write_text(NOOP_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so_shim), str(ROOT / "csrc" / "launch_shim.c")],
                   check=True)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so_noop), str(Path(tmp) / "noop.c")], check=True)
    return so_shim, so_noop


def child(python_dir, package, store, shim, noop, calls, reps):
    """One process: time the parts, print one JSON line."""
    sys.path.insert(0, python_dir)
    sys.path.insert(0, str(ROOT / "tests" / "launch_record"))
    import recorder
    recorder.PACKAGE = package
    recorder._install_fake_cuda()
    import torch
    # no NaN fill of every fresh output (the recorder's determinism), and outputs small enough for malloc's arenas:
    # CPU allocations of the [128, 7168] outputs mmap and fault pages in, which would be all that is timed
    torch.use_deterministic_algorithms(False)
    torch.utils.deterministic.fill_uninitialized_memory = False
    import os
    os.environ[f"{package.upper()}_KERNEL_DIR"] = store
    rec = recorder.Recorder()
    rec.cuLaunchKernelEx = ctypes.CDLL(noop).tk_noop_launch
    recorder._install_driver(rec, shim)
    pkg = __import__(package)
    x = torch.randn(128, 512).to(torch.bfloat16)
    scores = torch.randn(128, 256)
    q = torch.empty(128, 512, dtype=torch.float8_e4m3fn)
    sf = torch.empty(128, 4)
    parts = {
        "per_token_cast_plan": lambda: pkg.quant.per_token_cast(x, "e4m3", 128),
        "per_token_cast_out": lambda: pkg.quant.per_token_cast(x, "e4m3", 128, out=(q, sf)),
        "topk_gate_plan": lambda: pkg.moe.topk_gate(scores, 8),
        "torch_empty_like_q": lambda: torch.empty_like(q),
    }
    for f in parts.values():  # plans and modules exist from here on
        f()
        f()
    samples = {k: [] for k in parts}
    for _ in range(reps):
        for name, f in parts.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            samples[name].append((time.perf_counter() - t0) / calls * 1e6)
    print(json.dumps({k: round(statistics.median(v), 3) for k, v in samples.items()}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="PYTHON_DIR:PACKAGE of the first tree")
    p.add_argument("--b", required=True, help="PYTHON_DIR:PACKAGE of the second tree")
    p.add_argument("--store", required=True, help="a kernel store holding the sm_90a variants the parts use")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out")
    p.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        python_dir, package, store, shim, noop, reps = a.child
        return child(python_dir, package, store, shim, noop, a.calls, int(reps))
    with tempfile.TemporaryDirectory() as tmp:
        shim, noop = _build(tmp)
        results = {"a": [], "b": []}
        for r in range(a.rounds):
            for side in (("a", "b") if r % 2 == 0 else ("b", "a")):
                python_dir, package = getattr(a, side).rsplit(":", 1)
                out = subprocess.run([sys.executable, __file__, "--a", a.a, "--b", a.b, "--store", a.store,
                                      "--calls", str(a.calls), "--child", str(Path(python_dir).resolve()), package,
                                      a.store, str(shim), str(noop), str(a.reps)],
                                     check=True, capture_output=True, text=True, cwd=ROOT).stdout
                results[side].append(json.loads(out.strip().splitlines()[-1]))
    summary = {side: {k: [run[k] for run in runs] for k in runs[0]} for side, runs in results.items()}
    report = {"a": a.a, "b": a.b, "calls": a.calls, "reps": a.reps, "per_process_us": summary,
              "median_us": {side: {k: statistics.median(v) for k, v in parts.items()} for side, parts in summary.items()}}
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
