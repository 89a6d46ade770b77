#!/usr/bin/env bash
# GPU verification: the wheel of HEAD, built here, installed on the H200 without tilelang or nvcc,
# runs the GPU tests and the benchmarks of the same commit. Three steps, because the GPU is another machine:
#
#   1. here:    scripts/gpu_verify.sh prepare      # HEAD's wheel + source export into .gpu-carry/ (git-ignored)
#   2. device:  run tool, carry [".gpu-carry"], command:
#               bash scripts/gpu_verify.sh device   # fresh --target install, pytest -m gpu, benchmarks -> $OUT
#   3. here:    scripts/gpu_verify.sh collect <files_at>  # into benchmarks/results/<date>-<sha>/ + RESULTS.md
#
# Device-step knobs (the session's device time is limited): GPU_TEST_PROCS (parallel pytest processes,
# default 4), GPU_TEST_FILES (default: every tests/*/test_*.py), GPU_TEST_TIMEOUT_S, GPU_VERIFY_BUDGET_S
# (benchmarks stop when it is spent), BENCHES (default: foundation, every bench_ops_*, launch paths;
# "none" runs none), PROFILE_BENCHES (benchmark scripts to run again under ncu; default none).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: gpu_verify.sh prepare|device|collect DIR}

case "$mode" in
prepare)
  # Exactly the committed tree (HEAD), never uncommitted edits: the wheel is built from an
  # export of HEAD, and the tests and benchmarks that run on the device come from the same export.
  rm -rf .gpu-carry && mkdir -p .gpu-carry
  git archive --format=tar.gz HEAD > .gpu-carry/src.tar.gz  # compressed: the carry is limited
  git rev-parse HEAD > .gpu-carry/git-sha
  if [ -n "${WHEEL:-}" ]; then cp "$WHEEL" .gpu-carry/; else
    export_dir=$(mktemp -d) && tar -xzf .gpu-carry/src.tar.gz -C "$export_dir"
    # ARCHES=sm_90a: only the H200's arch (half the cold build) for a wheel that only the H200 runs
    python3 -m pip wheel "$export_dir" --no-deps -w .gpu-carry -v \
        ${ARCHES:+--config-settings=cmake.define.KERNELKILN_ARCHES=$ARCHES} 2>&1 | tail -5
    rm -rf "$export_dir"; fi
  ls -la .gpu-carry
  ;;
device)
  : "${OUT:?run this on the device machine, where OUT is set}"
  exec > >(tee "$OUT/gpu_verify.log") 2>&1
  export PYTHONUNBUFFERED=1
  # A fresh --target dir on the image's python3 (which holds torch; it is itself a venv, so a
  # --system-site-packages venv would not see torch). Nothing else of ours is importable.
  rm -rf /tmp/tk-site /tmp/tk-src && mkdir -p /tmp/tk-src
  python3 -m pip install -q --no-index --no-deps --target /tmp/tk-site .gpu-carry/kernelkiln-*.whl
  tar -xzf .gpu-carry/src.tar.gz -C /tmp/tk-src && cd /tmp/tk-src  # tests + benchmarks of the wheel's commit
  export PYTHONPATH=/tmp/tk-site
  PY=python3
  $PY - <<'PY'
import importlib.util, shutil
assert importlib.util.find_spec("tilelang") is None, "tilelang must not be installed on the GPU machine"
assert importlib.util.find_spec("tvm") is None, "tvm must not be installed on the GPU machine"
import kernelkiln, torch
print("kernelkiln from", kernelkiln.__file__, "kernels:", len(kernelkiln.list_kernels()),
      "device:", torch.cuda.get_device_name(), "nvcc on PATH:", shutil.which("nvcc"))
PY
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  # Tests import the installed wheel, never the source tree. Every test file goes to one of
  # GPU_TEST_PROCS parallel pytest processes on the one GPU (correctness tests leave it mostly
  # idle); the benchmarks run alone afterwards.
  # Optional wall-clock budget (the device time of a session is limited): tests get at most
  # GPU_TEST_TIMEOUT_S, and each benchmark only what is left of GPU_VERIFY_BUDGET_S.
  deadline=$((SECONDS + ${GPU_VERIFY_BUDGET_S:-3600}))
  nproc_tests=${GPU_TEST_PROCS:-4}
  # GPU_TEST_FILES narrows the files (default: all); the device tool returns at most 8 files, so
  # per-group logs and junit files go into one tar and one combined log.
  if [ -n "${GPU_TEST_FILES:-}" ]; then read -r -a all_files <<< "$GPU_TEST_FILES"
  else mapfile -t all_files < <(ls tests/*/test_*.py | sort); fi
  work=$(mktemp -d) pids=() i=0
  # groups of about equal run time (scripts/split_tests.py: durations of the last committed GPU run)
  mapfile -t groups < <($PY scripts/split_tests.py "$nproc_tests" "${all_files[@]}")
  for line in "${groups[@]}"; do
    read -r -a files <<< "$line"
    i=$((i + 1))
    # (rc kept explicitly: under set -e a failing pytest would end the subshell before the rc line)
    (rc=0; KERNELKILN_TEST_INSTALLED=1 timeout -s INT "${GPU_TEST_TIMEOUT_S:-1800}" \
        $PY -m pytest "${files[@]}" -m gpu -q -p no:cacheprovider --maxfail=200 \
        --junitxml="$work/gpu_tests_$i.xml" ${PYTEST_ARGS:-} > "$work/gpu_tests_$i.log" 2>&1 || rc=$?
     echo "group $i rc=$rc files: ${files[*]}" >> "$work/gpu_tests_$i.log") &
    pids+=($!)
  done
  wait "${pids[@]}" || true  # a failing group must not stop the benchmarks
  cat "$work"/gpu_tests_*.log > "$OUT/gpu_tests.log"
  tar -czf "$OUT/gpu_tests.tgz" -C "$work" .
  for f in "$work"/gpu_tests_*.log; do tail -2 "$f"; done
  # The foundation figures, then one benchmark script per op family (benchmarks/bench_ops_<family>.py).
  mkdir -p "$work/bench"
  for b in ${BENCHES:-benchmarks/bench_foundation.py benchmarks/bench_ops_*.py benchmarks/bench_launch_paths.py}; do
    [ -e "$b" ] || continue
    name=$(basename "$b" .py) left=$((deadline - SECONDS))
    if [ "$left" -lt 15 ]; then echo "BENCHMARK SKIPPED (time budget spent): $b"; continue; fi
    timeout "$left" $PY "$b" --out "$work/bench/$name.json" || echo "BENCHMARK FAILED or timed out: $b"
    tar -czf "$OUT/bench.tgz" -C "$work/bench" .  # after each one: a cut-off run keeps what finished
  done
  # PROFILE_BENCHES: benchmark scripts to run again under Nsight Compute: one call of every measured case
  # (bench_foundation.profile_once marks and labels it), exported as CSV for benchmarks/ncu_summary.py
  # (run by `collect`). Clocks are left alone (--clock-control none).
  mkdir -p "$work/profile"
  for b in ${PROFILE_BENCHES:-}; do
    name=$(basename "$b" .py) left=$((deadline - SECONDS))
    if [ "$left" -lt 30 ]; then echo "PROFILE SKIPPED (time budget spent): $b"; continue; fi
    KERNELKILN_PROFILE_LABELS="$work/profile/$name.labels.jsonl" \
    timeout "$left" ncu --clock-control none --profile-from-start off \
        --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
        --section SchedulerStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        -o "$work/profile/$name" -f $PY "$b" --out "$work/profile/$name.json" > "$work/profile/$name.log" 2>&1 \
      || { echo "PROFILE FAILED or timed out: $b (tail of its log:)"; tail -3 "$work/profile/$name.log"; }
    [ -e "$work/profile/$name.ncu-rep" ] && ncu -i "$work/profile/$name.ncu-rep" --csv --page raw \
        > "$work/profile/$name.csv" 2>/dev/null || true
    tar -czf "$OUT/profile.tgz" -C "$work" profile
  done
  ;;
collect)
  src=${2:?collect needs the files_at directory}
  sha=$(cat .gpu-carry/git-sha 2>/dev/null || git rev-parse HEAD)
  dest=benchmarks/results/$(date -u +%Y-%m-%d)-${sha:0:10}
  mkdir -p "$dest" && cp "$src"/* "$dest"/ && echo "$sha" > "$dest/git-sha"
  for t in "$dest"/*.tgz; do [ -e "$t" ] && tar -xzf "$t" -C "$dest" && rm "$t"; done
  if [ -d "$dest/profile" ]; then python3 benchmarks/ncu_summary.py "$dest/profile" > /dev/null; rm -f "$dest"/profile/*.ncu-rep; fi
  python3 benchmarks/make_results_table.py "$dest" && echo "results in $dest"
  ;;
*) echo "unknown mode $mode" >&2; exit 2 ;;
esac
