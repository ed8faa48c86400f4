#!/bin/sh
set +e
O=/tmp/oute; rm -rf $O; mkdir -p $O
R="sh gpu-bin-e/run.sh"
env | grep -i backtrace > $O/env.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv > $O/host.txt 2>&1
for i in 1 2; do
  TENSOR_LIFETIME_JSON=$O/oom-$i.json timeout 200 $R cuda_oom > $O/oom-$i.txt 2>&1; echo "rc=$?" >> $O/oom-$i.txt
done
RUST_BACKTRACE=1 timeout 200 $R cuda_oom > $O/oom-backtrace1.txt 2>&1
TENSOR_LIFETIME_JSON=$O/cuda_training-leaky.json timeout 200 $R cuda_training leaky > $O/cuda_training-leaky.txt 2>&1
tar czf $OUT/e1.tgz -C $O .
# sampled mode against untracked, one call; rollout plain/tracked alternated, 3 rounds
TENSOR_LIFETIME_SAMPLE=512KiB timeout 200 $R bench_loops interleave --device cuda --rounds 12 --small-steps 20 --mlp-steps 50 > $O/sampled-interleave.txt 2>&1
for r in 1 2 3; do for n in 1000 10000 100000; do for v in plain tracked; do
  printf "round %s n %s %s " $r $n $v >> $O/sampled-rollout.txt
  TENSOR_LIFETIME_SAMPLE=512KiB TENSOR_LIFETIME_REPORT=off timeout 100 $R bench_loops run rollout $v --device cuda --steps $n --warmup 1 --epochs 3 >> $O/sampled-rollout.txt 2>&1
done; done; done
tar czf $OUT/e.tgz -C $O .
ls -la $O
