#!/bin/sh
# One device call: the CUDA training example built against candle-core 0.9.1
# (`cargo xtask gpu-build --candle 0.9.1 --example cuda_training`) and against the
# workspace's 0.11.1 (`cargo xtask gpu-build --example cuda_training`), leaky and clean.
# Run from anywhere: sh docs/gpu-runs/h200/2026-12-03-candle-0.9.1/run.sh (outputs in $OUT).
cd "$(dirname "$0")/../../../.." || exit 1
O=${OUT:-/tmp/out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/env.txt" 2>&1
for v in cuda_training-candle-0.9.1 cuda_training; do
  for mode in leaky clean; do
    sh gpu-bin/run.sh "$v" "$mode" > "$O/$v-$mode.txt" 2>&1
    echo "$v $mode: exit $?" >> "$O/env.txt"
  done
done
