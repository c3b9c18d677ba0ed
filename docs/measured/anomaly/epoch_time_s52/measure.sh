#!/bin/bash
# Session 52 (the kernels on torch's threads): the Tolokers detector's epoch with and without --native-attention (kernels and
# the compiled generator), three alternating rounds, 2 threads, nothing else running.
set -e
cd "$(dirname "$0")/../../../.."
OUT=docs/measured/anomaly/epoch_time_s52
for round in a b c; do
  for flag in --no-native-attention --native-attention; do
    et-graph anomaly --config configs/anomaly/tolokers-tuned-v4-et.toml --models et --epochs 8 \
        --seeds 1 --threads 2 --no-energy-row --no-progress $flag --out runs/s52/tol_${flag#--}_$round
    cp runs/s52/tol_${flag#--}_$round/results.json $OUT/${flag#--}_$round.json
  done
done
python - <<'PY'
import json
for flag in ("no-native-attention", "native-attention"):
    print(flag, [round(json.load(open(f"docs/measured/anomaly/epoch_time_s52/{flag}_{r}.json"))
                       ["epoch_seconds_median"]["et"], 3) for r in "abc"])
PY
