#!/bin/sh
# One device call: the small loop and MLP (interleave), the same with the event log,
# and the rollout loop plain / tracked / tracked with the log at N = 1 000, 10 000, 100 000.
cd "$(dirname "$0")/.."
R=sh\ gpu-bin/run.sh
O=${OUT:-/tmp/out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/env.txt" 2>&1
nproc >> "$O/env.txt"
export TENSOR_LIFETIME_REPORT=off
sh gpu-bin/run.sh bench_loops run small tracked --device cuda --steps 2 > /dev/null 2>&1
for i in 1 2; do
  sh gpu-bin/run.sh bench_loops interleave --device cuda --rounds 48 --small-steps 20 --mlp-steps 50 > "$O/interleave_$i.txt" 2>&1
done
TENSOR_LIFETIME_LOG=/tmp/il.jsonl sh gpu-bin/run.sh bench_loops interleave --device cuda --rounds 48 --small-steps 20 --mlp-steps 50 > "$O/interleave_log.txt" 2>&1
ls -la /tmp/il.jsonl >> "$O/interleave_log.txt"
for n in 1000 10000 100000; do
  for r in 1 2 3 4; do
    if [ $((r % 2)) -eq 1 ]; then order="plain tracked log"; else order="log tracked plain"; fi
    for v in $order; do
      if [ "$v" = log ]; then
        line=$(TENSOR_LIFETIME_LOG=/tmp/r.jsonl sh gpu-bin/run.sh bench_loops run rollout tracked --device cuda --steps $n --warmup 1 --epochs 3 2>&1 | tail -1)
      else
        line=$(sh gpu-bin/run.sh bench_loops run rollout $v --device cuda --steps $n --warmup 1 --epochs 3 2>&1 | tail -1)
      fi
      echo "N=$n round=$r $v: $line" >> "$O/rollout.txt"
    done
  done
done
