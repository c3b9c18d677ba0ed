#!/usr/bin/env bash
# The CUDA checks of et-graph, in one run on a machine with an NVIDIA GPU (CI is CPU-only).
#
#   bash benchmarks/cuda_checks.sh OUT_DIR
#
# 1. tests/test_cuda.py: the fused kernels, ETConv, RelationalETConv and ETGraphModel on the GPU
#    against the CPU in float64; autocast; chunked scoring; every detector and runner with
#    --device cuda.
# 2. bench_scale.py --device cuda: T-Finance's and T-Social's sizes, full batch (ET, GCN, GAT)
#    and T-Social mini-batch (ET, GraphSAGE) with chunked full-graph inference.
# 3. bench_etconv.py --device cuda: ETConv against TransformerConv and GATConv, CUDA events and
#    torch.cuda.max_memory_allocated.
# 4. bench_graph_epoch.py --device cuda: one NCI1 training epoch of ET against one of GIN.
#
# Each part has its own time limit and the next part runs whatever the last gave. Outputs in
# OUT_DIR: run.log (everything printed), junit.xml, scale.json/.md, bench_etconv.json,
# graph_epoch.json. DEVICE=cpu QUICK=1 runs the same plumbing on tiny sizes without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-cuda_checks}
mkdir -p "$out"
device=${DEVICE:-cuda}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/run.log"
if [ -n "${QUICK:-}" ]; then
    etconv_sizes=200x2000; scale=(--quick); epoch=(--limit 128 --repeats 1 --warmup 0)
else
    etconv_sizes=20000x400000,100000x2000000,1000000x20000000
    scale=(); epoch=(--repeats 3)
fi
step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log the output and the status
    local name=$1 limit=$2; shift 2
    echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" | tee -a "$log"
    local begin=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$log"
    echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - begin))s" | tee -a "$log"
}
step environment 60 python3 -c "
import platform, torch, torch_geometric
print('python', platform.python_version(), 'torch', torch.__version__, 'pyg',
      torch_geometric.__version__, 'cuda', torch.version.cuda)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(p.name, round(p.total_memory / 2**30, 1), 'GiB,', p.multi_processor_count, 'SMs')"
if [ "$device" != cpu ]; then
    step tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py \
        --junitxml="$out/junit.xml"
else
    step tests 150 env ET_GRAPH_TEST_DEVICE=cpu python3 -m pytest -q -p no:cacheprovider \
        tests/test_cuda.py --junitxml="$out/junit.xml"
fi
step scale 230 python3 benchmarks/bench_scale.py --device "$device" \
    --cases tfinance,tsocial_full,tsocial --threads 8 --memory-cap-gb 100 "${scale[@]}" \
    --json "$out/scale.json"
step etconv 100 python3 benchmarks/bench_etconv.py --device "$device" --sizes "$etconv_sizes" \
    --no-compile --threads 8 --json "$out/bench_etconv.json"
step graph_epoch 90 python3 benchmarks/bench_graph_epoch.py --device "$device" --threads 4 \
    "${epoch[@]}" --json "$out/graph_epoch.json"
