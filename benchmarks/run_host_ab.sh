#!/usr/bin/env bash
# Host time per call (bench_foundation's host_time_us) and device time (graph replay) of the carried wheel's
# runtime ("new") and of an older runtime ("old": its python/ tree, e.g. `git archive <rev> python/kernelkiln`
# extracted into .gpu-carry/oldpy, over the same wheel's kernels and shim), alternating fresh processes. Each
# process also times torch's own eager ops (one output; two outputs from one kernel, like per_token_cast; torch.topk)
# so that every figure has the same machine's torch floor beside it: host costs differ up to 2x between machines.
# On the GPU machine, from the repository root, with .gpu-carry carried:  bash benchmarks/run_host_ab.sh
# Optional: NEW_PY (a directory holding a kernelkiln/ Python tree to lay over the wheel's, for a runtime change not yet
# in a wheel) and NEW_SHIM (its libkernelkiln_launch.so); ROUNDS (default 3); OLD_PKG, the old tree's package name
# (default kernelkiln; tilekiln for trees before the rename, whose shim is the same C source under its old name).
# (benchmarks/results/2026-12-01-81164c141b/host_ab.jsonl: old = 9f8eb0c, before the lazy op registration.)
set -u
rm -rf /tmp/tk-site; python3 -m pip install -q --no-index --no-deps --target /tmp/tk-site .gpu-carry/kernelkiln-*.whl
old_pkg=${OLD_PKG:-kernelkiln}
rm -rf /tmp/tk-old && cp -r .gpu-carry/oldpy/python /tmp/tk-old
cp -r /tmp/tk-site/kernelkiln/_kernels "/tmp/tk-old/$old_pkg/"
cp /tmp/tk-site/kernelkiln/_runtime/libkernelkiln_launch.so "/tmp/tk-old/$old_pkg/_runtime/lib${old_pkg}_launch.so"
new=/tmp/tk-site
if [ -n "${NEW_PY:-}" ]; then
  rm -rf /tmp/tk-new && cp -r "$NEW_PY" /tmp/tk-new && cp -r /tmp/tk-site/kernelkiln/_kernels /tmp/tk-new/kernelkiln/
  cp "${NEW_SHIM:-/tmp/tk-site/kernelkiln/_runtime/libkernelkiln_launch.so}" /tmp/tk-new/kernelkiln/_runtime/
  new=/tmp/tk-new
fi
cat > /tmp/host.py <<'PY'
import importlib, json, os, sys, torch
sys.path.insert(0, "benchmarks")
from bench_foundation import graph_time_us, host_time_us
kernelkiln = importlib.import_module(os.environ.get("TK_PKG", "kernelkiln"))
xs = torch.randn(128, 7168, device="cuda", dtype=torch.bfloat16); ss = torch.randn(128, 256, device="cuda")
small = torch.randn(1024, device="cuda")
r = {"label": sys.argv[1], "kernelkiln": kernelkiln.__file__,
     "per_token_cast": round(host_time_us(lambda: kernelkiln.quant.per_token_cast(xs, "e4m3", 128)), 2),
     "topk_gate": round(host_time_us(lambda: kernelkiln.moe.topk_gate(ss, 8)), 2),
     "empty_like": round(host_time_us(lambda: torch.empty_like(xs)), 2),
     "torch_mul_1024": round(host_time_us(lambda: small * 2.0), 2),
     "torch_frexp_1024": round(host_time_us(lambda: torch.frexp(small)), 2),
     "torch_topk": round(host_time_us(lambda: torch.topk(ss, 8)), 2),
     "per_token_cast_gpu": round(graph_time_us(lambda: kernelkiln.quant.per_token_cast(xs, "e4m3", 128)), 2),
     "topk_gate_gpu": round(graph_time_us(lambda: kernelkiln.moe.topk_gate(ss, 8)), 2)}
print(json.dumps(r), flush=True)
PY
for round in $(seq "${ROUNDS:-3}"); do
  PYTHONPATH=$new python3 /tmp/host.py new
  TK_PKG=$old_pkg PYTHONPATH=/tmp/tk-old python3 /tmp/host.py old
done
