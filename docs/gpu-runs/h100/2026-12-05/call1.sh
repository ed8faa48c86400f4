#!/bin/sh
set +e
O=/tmp/outf; rm -rf $O; mkdir -p $O
R="sh gpu-bin/run.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv > $O/host.txt 2>&1
echo d76e3cd > $O/commit.txt
for r in 1 2; do
TENSOR_LIFETIME_SAMPLE=512KiB timeout 170 $R bench_loops interleave --device cuda --rounds 12 --small-steps 20 --mlp-steps 50 --rollout 1000,10000,100000 > $O/sampled-interleave-$r.txt 2>&1
echo "rc=$?" >> $O/sampled-interleave-$r.txt
cp $O/* $OUT/ 2>/dev/null
done
timeout 170 $R bench_loops interleave --device cuda --rounds 12 --small-steps 20 --mlp-steps 50 --rollout 1000,10000 > $O/exact-interleave.txt 2>&1
echo "rc=$?" >> $O/exact-interleave.txt
cp $O/* $OUT/ 2>/dev/null
ls -la $O
