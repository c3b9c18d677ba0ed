#!/bin/bash
# Session 52, after the kernels learned to use torch's threads (nothing else running):
# one thread again (no regression?), then both models on two threads.
# bash measure_threads.sh [PREFIX [TWO_THREAD_RUNS]]: the files are PREFIX_1thread_rN.json (three
# runs) and PREFIX_2threads_rN.json (default three runs; default PREFIX threaded_kernels,
# final_code for the session's last kernel change; measure_exp.sh: vector_exp, two runs).
set -e
cd "$(dirname "$0")/../../../.."
OUT=docs/measured/graph/native_s52
PREFIX=${1:-threaded_kernels}
TWO_THREAD_RUNS=${2:-3}
uptime; lscpu | grep "Model name"
for r in 1 2 3; do
  OMP_NUM_THREADS=1 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 1 \
      --repeats 7 --native-compare --json $OUT/${PREFIX}_1thread_r$r.json | tail -5
done
for r in $(seq "$TWO_THREAD_RUNS"); do
  OMP_NUM_THREADS=2 python benchmarks/bench_graph_epoch.py --dataset NCI1 --no-preset --threads 2 \
      --repeats 7 --native-compare --json $OUT/${PREFIX}_2threads_r$r.json | tail -5
done
uptime
# The session-51 kernels on this machine, for comparison (a worktree of f069837 at /tmp/old52,
# its own build):
#   cd /tmp/old52 && PYTHONPATH=/tmp/old52 OMP_NUM_THREADS=2 python benchmarks/bench_graph_epoch.py \
#       --dataset NCI1 --no-preset --threads 2 --repeats 7 --native-compare \
#       --json $OUT/session51_kernels_2threads_r1.json            # and _r2
#   PYTHONPATH=/tmp/old52 OMP_NUM_THREADS=T python benchmarks/bench_native_attention.py --threads T \
#       --json $OUT/session51_kernels_large_graph_tT.json         # T = 2, then 1
# and this code's (before the anomaly timings, docs/measured/anomaly/epoch_time_s52/measure.sh):
#   OMP_NUM_THREADS=T python benchmarks/bench_native_attention.py --threads T \
#       --json $OUT/large_graph_tT.json                            # T = 1, then 2
