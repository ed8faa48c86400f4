#!/bin/sh
# One device call: the CUDA training example built against candle-core 0.10.2
# (`cargo xtask gpu-build --candle 0.10.2 --example cuda_training`), leaky and clean.
# Run from anywhere: sh docs/gpu-runs/h200/2026-12-03-candle-0.10.2/run.sh (outputs in $OUT).
cd "$(dirname "$0")/../../../.." || exit 1
O=${OUT:-/tmp/out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/env.txt" 2>&1
for mode in leaky clean; do
  sh gpu-bin/run.sh cuda_training-candle-0.10.2 "$mode" > "$O/cuda_training-candle-0.10.2-$mode.txt" 2>&1
  echo "cuda_training-candle-0.10.2 $mode: exit $?" >> "$O/env.txt"
done
