#!/bin/bash
# Session 52, after the softmax's exponentials became one vector loop (nothing else running).
set -e
cd "$(dirname "$0")/../../../.."
OUT=docs/measured/graph/native_s52
uptime; lscpu | grep "Model name"
for r in 1 2 3; do
  OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
      --repeats 7 --native-compare --json $OUT/vector_exp_1thread_r$r.json | tail -5
done
for r in 1 2; do
  OMP_NUM_THREADS=2 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 2 \
      --repeats 7 --native-compare --json $OUT/vector_exp_2threads_r$r.json | tail -5
done
for r in 1 2; do
  OMP_NUM_THREADS=1 python benchmarks/bench_descent_parts.py --native --threads 1 --repeats 15 \
      --json $OUT/vector_exp_descent_parts_r$r.json | grep native_attention
done
uptime
