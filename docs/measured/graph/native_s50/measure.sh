#!/bin/bash
# Session 50 timings, run with nothing else on the machine.
set -e
cd /work/main
OUT=docs/measured/graph/native_s50
uptime
OMP_NUM_THREADS=1 python benchmarks/bench_descent_parts.py --native --threads 1 --json $OUT/bench_descent_parts_nci1.json
for r in 1 2; do
  OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
      --repeats 7 --native-compare --json $OUT/bench_graph_epoch_nci1_r$r.json | tail -12
done
OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
    --repeats 5 --native-attention --breakdown --json $OUT/bench_graph_epoch_nci1_breakdown_native.json | tail -14
OMP_NUM_THREADS=1 python benchmarks/bench_native_attention.py --threads 1 --json $OUT/large_graph_t1.json | tail -6
python benchmarks/bench_native_attention.py --threads 2 --json $OUT/large_graph_t2.json | tail -6
uptime
