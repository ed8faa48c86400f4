#!/bin/sh
# Device call A: decoding/server clean+leak, cuda_training leaky, cuda_oom.
set +e
O=${OUT:-/tmp/out}; mkdir -p $O
R="sh gpu-bin-a/run.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv > $O/host.txt 2>&1
t() { echo "== $*" >&2; s=$(date +%s.%N); timeout 200 "$@"; rc=$?; echo "rc=$rc wall=$(echo "$(date +%s.%N) - $s" | bc)s" >&2; }
for ex in decoding server; do
  TENSOR_LIFETIME_JSON=$O/$ex-clean.json t $R $ex --device cuda > $O/$ex-clean.txt 2>&1
  TENSOR_LIFETIME_JSON=$O/$ex-leak.json t $R $ex --device cuda --leak > $O/$ex-leak.txt 2>&1
done
TENSOR_LIFETIME_JSON=$O/cuda_training-leaky.json t $R cuda_training leaky > $O/cuda_training-leaky.txt 2>&1
TENSOR_LIFETIME_JSON=$O/oom.json t $R cuda_oom > $O/oom.txt 2>&1
ls -la $O
