#!/bin/bash
# Session 52, after the softmax's exponentials became one vector loop (nothing else running):
# the epochs as measure_threads.sh takes them (two runs on two threads), then the descent's parts.
set -e
cd "$(dirname "$0")/../../../.."
OUT=docs/measured/graph/native_s52
bash $OUT/measure_threads.sh vector_exp 2
for r in 1 2; do
  OMP_NUM_THREADS=1 python benchmarks/bench_descent_parts.py --native --threads 1 --repeats 15 \
      --json $OUT/vector_exp_descent_parts_r$r.json | grep native_attention
done
uptime
