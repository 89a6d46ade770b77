#!/usr/bin/env bash
# KernelKiln and tile_kernels 2.1.0 side by side on the GPU machine (benchmarks/bench_side_by_side.py).
#   here:    scripts/gpu_verify.sh prepare && scripts/gpu_side_by_side.sh prepare   # the peer's stack too
#   device:  run tool, carry [".gpu-carry"], command: bash scripts/gpu_side_by_side.sh device
#   here:    scripts/gpu_verify.sh collect <files_at>                               # side_by_side.json + table
# The peer compiles its kernels on first call (TileLang JIT with the machine's nvcc), so it needs tilelang,
# z3-solver, apache-tvm-ffi and torch-c-dlpack-ext there, none of which the GPU image has and none of which it can
# download. As wheels they are over the device tool's 64 MiB carry (tilelang 49.5 MB + z3-solver 29.3 MB), so
# `prepare` repacks the two big ones with xz (tilelang whole; of z3-solver only its Python package and a stripped
# libz3.so, which is what libtvm_compiler.so links and tilelang imports): about 40 MB in all.
# Device knobs: SBS_WARM_PROCS (parallel processes that run the peer's first calls to fill TileLang's disk cache,
# default 12), SBS_WARM_TIMEOUT_S (default 300), SBS_TIMEOUT_S (the measuring run, default 420), SBS_ARGS (extra
# arguments of the harness, e.g. "--families quant,moe"), SBS_DIAG (a command run with both packages importable before
# the warm-up, e.g. "python3 scripts/diag_mhc_post.py"; its output goes to $OUT/diag.log), SBS_SKIP_BENCH=1 (only
# SBS_DIAG).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:?usage: gpu_side_by_side.sh prepare|device}" in
prepare)
  [ -e .gpu-carry/src.tar.gz ] || { echo "run scripts/gpu_verify.sh prepare first" >&2; exit 2; }
  rm -rf .gpu-carry/peer && mkdir -p .gpu-carry/peer && work=$(mktemp -d)
  # wheels for the GPU machine's Python 3.12
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$work" \
      tilelang==0.1.15 apache-tvm-ffi==0.1.12 z3-solver==4.15.4.0 torch-c-dlpack-ext==0.1.5 tile-kernels==2.1.0
  mv "$work"/apache_tvm_ffi-*.whl "$work"/torch_c_dlpack_ext-*.whl "$work"/tile_kernels-*.whl .gpu-carry/peer/
  mkdir "$work/tl" "$work/z3" && (cd "$work/tl" && unzip -q ../tilelang-*.whl) && (cd "$work/z3" && unzip -q ../z3_solver-*.whl)
  strip "$work"/z3/z3/lib/libz3.so && rm -f "$work"/z3/z3/lib/libz3.so.*
  tar -C "$work/tl" -cf - . | xz -6 -T2 > .gpu-carry/peer/tilelang.tar.xz
  tar -C "$work/z3" -cf - z3 | xz -6 -T2 > .gpu-carry/peer/z3.tar.xz
  rm -rf "$work" && du -sh .gpu-carry .gpu-carry/peer
  ;;
device)
  : "${OUT:?run this on the device machine, where OUT is set}"
  exec > >(tee "$OUT/side_by_side.log") 2>&1
  export PYTHONUNBUFFERED=1
  rm -rf /tmp/tk-site /tmp/peer-site /tmp/sbs-src && mkdir -p /tmp/peer-site /tmp/sbs-src
  python3 -m pip install -q --no-index --no-deps --target /tmp/tk-site .gpu-carry/kernelkiln-*.whl
  for t in .gpu-carry/peer/*.tar.xz; do tar -xJf "$t" -C /tmp/peer-site; done
  ln -sf libz3.so /tmp/peer-site/z3/lib/libz3.so.4.15
  python3 -m pip install -q --no-index --no-deps --ignore-requires-python --target /tmp/peer-site .gpu-carry/peer/*.whl
  tar -xzf .gpu-carry/src.tar.gz -C /tmp/sbs-src && cd /tmp/sbs-src  # the harness of the wheel's commit
  export PYTHONPATH=/tmp/tk-site:/tmp/peer-site LD_LIBRARY_PATH=/tmp/peer-site/z3/lib:${LD_LIBRARY_PATH:-}
  python3 -c "import tile_kernels, kernelkiln, torch; print('peer', tile_kernels.__version__, 'ours', kernelkiln.__file__, torch.__version__)"
  if [ -n "${SBS_DIAG:-}" ]; then
    (eval "$SBS_DIAG") > "$OUT/diag.log" 2>&1 || echo "SBS_DIAG: rc=$?"
    tail -n 60 "$OUT/diag.log"
  fi
  [ "${SBS_SKIP_BENCH:-0}" = 1 ] && exit 0
  n=${SBS_WARM_PROCS:-12} pids=()
  for ((k = 0; k < n; k++)); do
    (timeout "${SBS_WARM_TIMEOUT_S:-300}" python3 benchmarks/bench_side_by_side.py ${SBS_ARGS:-} --warm-peer "$k/$n" \
        --warm-out "$OUT/peer_jit.jsonl.$k" > "/tmp/warm_$k.log" 2>&1 || echo "warm-up $k: rc=$?") &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  cat "$OUT"/peer_jit.jsonl.* > "$OUT/peer_jit.jsonl" && rm -f "$OUT"/peer_jit.jsonl.*
  tail -n 3 /tmp/warm_*.log | tail -n 40
  timeout "${SBS_TIMEOUT_S:-420}" python3 benchmarks/bench_side_by_side.py ${SBS_ARGS:-} \
      --warm-out "$OUT/peer_jit.jsonl" --out "$OUT/side_by_side.json" || echo "measuring run: rc=$?"
  ;;
*) echo "unknown mode $1" >&2; exit 2 ;;
esac
