#!/bin/sh
# One device call (issue 16, fourth step): the rollout loop at N = 1 000, 10 000, 100 000,
# untracked / tracked / tracked with the event log, the build before this step
# (gpu-bin/bench_old.gz, dccf239) and after it (gpu-bin/bench_new.gz) alternated in each
# round; before them, the small loop and the MLP (interleave) of the new build, and the
# same with the event log. Call 1 ran it as it is; call 2 with
# `NS="10000 100000" ROUNDS=6 IL_ROUNDS=48 IL_LOG=0`.
NS=${NS:-1000 10000 100000}
ROUNDS=${ROUNDS:-4}
IL_ROUNDS=${IL_ROUNDS:-24}
IL_LOG=${IL_LOG:-1}
cd "$(dirname "$0")/../../../.."
O=${OUT:-/tmp/out}
mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/env.txt" 2>&1
nproc >> "$O/env.txt"
export TENSOR_LIFETIME_REPORT=off
for b in bench_old bench_new; do
  sh gpu-bin/run.sh $b run small tracked --device cuda --steps 2 > /dev/null 2>&1
done
sh gpu-bin/run.sh bench_new interleave --device cuda --rounds $IL_ROUNDS --small-steps 20 --mlp-steps 50 > "$O/interleave.txt" 2>&1
if [ "$IL_LOG" = 1 ]; then
  TENSOR_LIFETIME_LOG=/tmp/il.jsonl sh gpu-bin/run.sh bench_new interleave --device cuda --rounds $IL_ROUNDS --small-steps 20 --mlp-steps 50 > "$O/interleave_log.txt" 2>&1
fi
one() { # NAME VARIANT N
  if [ "$2" = log ]; then
    TENSOR_LIFETIME_LOG=/tmp/r.jsonl sh gpu-bin/run.sh $1 run rollout tracked --device cuda --steps $3 --warmup 1 --epochs 3 2>&1 | tail -n 1
  else
    sh gpu-bin/run.sh $1 run rollout $2 --device cuda --steps $3 --warmup 1 --epochs 3 2>&1 | tail -n 1
  fi
}
for n in $NS; do
  for r in $(seq 1 $ROUNDS); do
    if [ $((r % 2)) -eq 1 ]; then order="new:plain old:tracked new:tracked old:log new:log"
    else order="new:log old:log new:tracked old:tracked new:plain"; fi
    for v in $order; do
      line=$(one bench_${v%%:*} ${v#*:} $n)
      echo "N=$n round=$r ${v%%:*} ${v#*:}: $line" >> "$O/rollout.txt"
    done
  done
done
