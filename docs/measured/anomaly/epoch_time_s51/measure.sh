#!/bin/bash
# Session 51: the Tolokers detector's epoch with and without --native-attention (kernels and
# the compiled generator), three alternating rounds, 2 threads, nothing else running.
# bash measure.sh [OUT [RUNS]]: results to OUT (default docs/measured/anomaly/epoch_time_s51),
# the runs' folders under RUNS (default runs/s51); session 52 reran it into epoch_time_s52.
set -e
cd "$(dirname "$0")/../../../.."
OUT=${1:-docs/measured/anomaly/epoch_time_s51}
RUNS=${2:-runs/s51}
for round in a b c; do
  for flag in --no-native-attention --native-attention; do
    et-graph anomaly --config configs/anomaly/tolokers-tuned-v4-et.toml --models et --epochs 8 \
        --seeds 1 --threads 2 --no-energy-row --no-progress $flag --out $RUNS/tol_${flag#--}_$round
    cp $RUNS/tol_${flag#--}_$round/results.json $OUT/${flag#--}_$round.json
  done
done
python - "$OUT" <<'PY'
import json
import sys
for flag in ("no-native-attention", "native-attention"):
    print(flag, [round(json.load(open(f"{sys.argv[1]}/{flag}_{r}.json"))
                       ["epoch_seconds_median"]["et"], 3) for r in "abc"])
PY
