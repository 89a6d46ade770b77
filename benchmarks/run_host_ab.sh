#!/usr/bin/env bash
# Host time per call (bench_foundation's host_time_us) and device time (graph replay) of the carried wheel's
# runtime ("new") and of an older runtime ("old": its python/ tree, e.g. `git archive <rev> python/tilekiln`
# extracted into .gpu-carry/oldpy, over the same wheel's kernels and shim), alternating fresh processes.
# On the GPU machine, from the repository root, with .gpu-carry carried:  bash benchmarks/run_host_ab.sh
# (benchmarks/results/2026-12-01-81164c141b/host_ab.jsonl: old = 9f8eb0c, before the lazy op registration).
set -u
rm -rf /tmp/tk-site; python3 -m pip install -q --no-index --no-deps --target /tmp/tk-site .gpu-carry/tilekiln-*.whl
rm -rf /tmp/tk-old && cp -r .gpu-carry/oldpy/python /tmp/tk-old
cp -r /tmp/tk-site/tilekiln/_kernels /tmp/tk-old/tilekiln/ && cp /tmp/tk-site/tilekiln/_runtime/*.so /tmp/tk-old/tilekiln/_runtime/
cat > /tmp/host.py <<'PY'
import sys, json, torch
sys.path.insert(0, "benchmarks")
from bench_foundation import graph_time_us, host_time_us
import tilekiln
xs = torch.randn(128, 7168, device="cuda", dtype=torch.bfloat16); ss = torch.randn(128, 256, device="cuda")
r = {"label": sys.argv[1], "tilekiln": tilekiln.__file__,
     "per_token_cast": round(host_time_us(lambda: tilekiln.quant.per_token_cast(xs, "e4m3", 128)), 2),
     "topk_gate": round(host_time_us(lambda: tilekiln.moe.topk_gate(ss, 8)), 2),
     "empty_like": round(host_time_us(lambda: torch.empty_like(xs)), 2),
     "per_token_cast_gpu": round(graph_time_us(lambda: tilekiln.quant.per_token_cast(xs, "e4m3", 128)), 2),
     "topk_gate_gpu": round(graph_time_us(lambda: tilekiln.moe.topk_gate(ss, 8)), 2)}
print(json.dumps(r), flush=True)
PY
for round in 1 2 3; do
  PYTHONPATH=/tmp/tk-site python3 /tmp/host.py new
  PYTHONPATH=/tmp/tk-old python3 /tmp/host.py old
done
