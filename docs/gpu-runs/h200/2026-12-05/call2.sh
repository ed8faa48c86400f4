#!/bin/sh
set +e
O=/tmp/outb; rm -rf $O; mkdir -p $O
t() { echo "== $*" >&2; s=$(date +%s.%N); timeout 250 "$@"; rc=$?; echo "rc=$rc wall=$(echo "$(date +%s.%N) - $s" | bc)s" >&2; }
RA="sh gpu-bin-c/run.sh"
for ex in server; do
  TENSOR_LIFETIME_JSON=$O/$ex-clean.json t $RA $ex --device cuda > $O/$ex-clean.txt 2>&1
  TENSOR_LIFETIME_JSON=$O/$ex-leak.json t $RA $ex --device cuda --leak > $O/$ex-leak.txt 2>&1
done
TENSOR_LIFETIME_JSON=$O/oom.json t $RA cuda_oom > $O/oom.txt 2>&1
R="sh gpu-bin-c/run.sh"
TENSOR_LIFETIME_SAMPLE=512KiB t $R bench_loops interleave --device cuda --rounds 12 --small-steps 20 --mlp-steps 50 > $O/sampled-interleave.txt 2>&1
for n in 1000 10000 100000; do for v in plain tracked; do
  echo "== rollout $n $v" >> $O/sampled-rollout.txt
  TENSOR_LIFETIME_SAMPLE=512KiB TENSOR_LIFETIME_REPORT=off t $R bench_loops run rollout $v --device cuda --steps $n --warmup 1 --epochs 5 >> $O/sampled-rollout.txt 2>&1
done; done
tar czf $OUT/b.tgz -C $O .
ls -la $O
