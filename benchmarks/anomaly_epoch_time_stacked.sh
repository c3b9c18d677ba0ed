#!/usr/bin/env bash
# Tolokers epoch time on 2 threads (the issue's protocol): the headline stacked detector
# (configs/anomaly/tolokers-stacked.toml, et_stacked) against the tuned v4 preset that the
# earlier sessions timed, alternating (the order flips in round 2), 20 epochs, one seed each.
# Run it on a quiet machine.
#
#   bash benchmarks/anomaly_epoch_time_stacked.sh runs/epoch_time_stacked [ROUNDS]
#
# Writes OUT/{stacked,v4}_rN/results.json and prints each median epoch (seconds).
set -euo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
ROUNDS=${2:-3}
cd "$(dirname "$0")/.."
for round in $(seq 1 "$ROUNDS"); do
  uptime
  order="stacked v4"
  [ "$round" = 2 ] && order="v4 stacked"
  for what in $order; do
    if [ "$what" = stacked ]; then
      args=(--config configs/anomaly/tolokers-stacked.toml --models et_stacked)
    else
      args=(--config configs/anomaly/tolokers-tuned-v4-et.toml --models et)
    fi
    PYTHONPATH="$PWD" python -m et_graph anomaly "${args[@]}" --epochs 20 --seeds 1 --threads 2 \
      --no-energy-row --no-progress --out "$OUT/${what}_r$round" > "$OUT/${what}_r$round.log" 2>&1
    python -c "import json, sys; print(sys.argv[2], json.load(open(sys.argv[1]))['epoch_seconds_median'])" \
      "$OUT/${what}_r$round/results.json" "${what}_r$round"
  done
done
