#!/usr/bin/env bash
# Tolokers ET epoch time of two checkouts in interleaved rounds (2 threads; the order flips in
# round 2), so that drifting machine load affects both alike. Run it on a quiet machine.
#
#   git worktree add /tmp/before 8aee47f
#   bash benchmarks/anomaly_epoch_time.sh /tmp/before runs/epoch_time   # before vs this checkout
#
# Writes OUT/{def,def2,v4}_{old,new}_r{1,2,3}/results.json (defaults; defaults with the two-hop
# readout; the tuned v4 preset) and prints each median epoch.
set -euo pipefail
OLD=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
NEW=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${3:-3}
run() {  # checkout, label, round, et-graph arguments...
  local tree=$1 tag=$2 round=$3
  shift 3
  local out="$OUT/${tag}_r$round"
  (cd "$tree" && PYTHONPATH="$tree" python -c \
    "import sys; from et_graph.cli import main; sys.argv = ['et-graph'] + sys.argv[1:]; main()" \
    "$@" --out "$out" > /dev/null 2>&1)
  python -c "import json, sys; print(sys.argv[1], json.load(open(sys.argv[2]))['epoch_seconds_median'])" \
    "${tag}_r$round" "$out/results.json"
}
for round in $(seq 1 "$ROUNDS"); do
  uptime
  order="old new"
  [ "$round" = 2 ] && order="new old"
  for version in $order; do
    tree=$NEW
    [ "$version" = old ] && tree=$OLD
    run "$tree" "def_$version" "$round" anomaly --dataset tolokers --models et --epochs 20 \
      --seeds 1 --threads 2 --no-energy-row
    run "$tree" "def2_$version" "$round" anomaly --dataset tolokers --models et --epochs 20 \
      --seeds 1 --threads 2 --no-energy-row --readout ego_two_hop
    run "$tree" "v4_$version" "$round" anomaly --config "$NEW/configs/anomaly/tolokers-tuned-v4-et.toml" \
      --models et --epochs 20 --seeds 1 --threads 2 --no-energy-row
  done
done
