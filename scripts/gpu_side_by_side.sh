#!/usr/bin/env bash
# KernelKiln and tile_kernels 2.1.0 side by side on the GPU machine (benchmarks/bench_side_by_side.py).
#   here:    scripts/gpu_verify.sh prepare && scripts/gpu_side_by_side.sh prepare   # the peer's wheels too
#   device:  run tool, carry [".gpu-carry"], command: bash scripts/gpu_side_by_side.sh device
# The peer needs tilelang and nvcc for its JIT. The GPU machine's image (Python 3.12.3) has nvcc and most of
# tilelang's dependencies but not z3-solver (29 MB) or torch_c_dlpack_ext (benchmarks/results/2026-12-02-28a7dd5739/
# probe.txt), and tilelang (49.5 MB) + z3-solver exceed the device tool's 64 MiB carry: this does not run there yet.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:?usage: gpu_side_by_side.sh prepare|device}" in
prepare)
  rm -rf .gpu-carry/peer && mkdir -p .gpu-carry/peer
  # wheels for the GPU machine's Python 3.12
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .gpu-carry/peer \
      tilelang==0.1.15 apache-tvm-ffi==0.1.12 z3-solver==4.15.4.0 torch-c-dlpack-ext
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .gpu-carry/peer tile-kernels==2.1.0
  du -sh .gpu-carry .gpu-carry/peer
  ;;
device)
  : "${OUT:?run this on the device machine, where OUT is set}"
  rm -rf /tmp/tk-site /tmp/peer-site
  python3 -m pip install -q --no-index --no-deps --target /tmp/tk-site .gpu-carry/kernelkiln-*.whl
  python3 -m pip install -q --no-index --no-deps --ignore-requires-python --target /tmp/peer-site .gpu-carry/peer/*.whl
  PYTHONPATH=/tmp/tk-site:/tmp/peer-site python3 benchmarks/bench_side_by_side.py --out "$OUT/side_by_side.json"
  ;;
esac
