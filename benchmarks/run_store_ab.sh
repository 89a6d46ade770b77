#!/usr/bin/env bash
# A/B of experiment kernel stores on the GPU machine, after `scripts/gpu_verify.sh device` has installed the
# wheel into /tmp/tk-site: bench_store_ab.py runs once with the wheel's own store ("base") and once per
# store folder under STORES_DIR, alternating over ROUNDS rounds, so every store sees the same machine state.
# A folder whose name ends in -r<N> holds rows=N variants: the script gets --rows N (bench_store_ab.py's
# option; bench_engram_store_ab.py has none and refuses it, so name its stores otherwise). JSON per run and one log go to $OUT/ab/. AB_SCRIPT
# picks another A/B script with the same arguments (--label, --out), e.g. bench_engram_store_ab.py; AB_ARGS adds
# arguments to every run (e.g. "--only gate_bwd").
#
#   STORES_DIR=.gpu-carry/exp ROUNDS=2 bash benchmarks/run_store_ab.sh
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
stores_dir=$(realpath "${STORES_DIR:?}")
here=$(cd "$(dirname "$0")" && pwd)
script=${AB_SCRIPT:-$here/bench_store_ab.py}
mkdir -p "$OUT/ab"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for store in base "$stores_dir"/*/; do
    label=$(basename "$store")
    rows=()
    [[ $label =~ -r([0-9]+)$ ]] && rows=(--rows "${BASH_REMATCH[1]}")
    env_dir=()
    [ "$label" != base ] && env_dir=(KERNELKILN_KERNEL_DIR="$store")
    echo "== round $round: $label"
    env "${env_dir[@]}" PYTHONPATH=/tmp/tk-site python3 "$script" --label "$label" "${rows[@]}" ${AB_ARGS:-} \
      --out "$OUT/ab/$label-$round.json" 2>&1 | tail -n 8
  done
done 2>&1 | tee "$OUT/ab/ab.log"
