#!/bin/bash
# Session 51 timings (the compiled generator for noise and dropout), nothing else running.
# Run twice: first_set/ holds the first run's files (before the Gram backward's per-CPU build).
# bash measure.sh [OUT]: the files go to OUT (default docs/measured/graph/native_s51; session 52
# reran it unchanged into native_s52).
set -e
cd "$(dirname "$0")/../../../.."
OUT=${1:-docs/measured/graph/native_s51}
uptime; lscpu | grep "Model name"
for r in 1 2 3; do
  OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
      --repeats 7 --native-compare --json $OUT/bench_graph_epoch_nci1_r$r.json | tail -5
done
# one longer rotation (15 epochs per model)
OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
    --repeats 15 --native-compare --json $OUT/bench_graph_epoch_nci1_long.json | tail -5
# the models' own work: batches collated once
OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
    --repeats 7 --native-compare --preloaded --json $OUT/bench_graph_epoch_nci1_preloaded.json | tail -5
# what each part costs with the compiled kernels (noise and dropout included)
OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
    --repeats 5 --native-attention --breakdown --json $OUT/bench_graph_epoch_nci1_breakdown_native.json | tail -10
uptime; lscpu | grep "Model name"
