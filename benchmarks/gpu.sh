#!/usr/bin/env bash
# GPU benchmark of the paper run's GPU half (one H100/H200): pretraining (phase-1 CLM and decay MLM,
# FlexAttention + torch.compile at the planner's micro-batch; transformers.Trainer as the reference), fine-tuning
# grid jobs (8,192-token NER and document classification, 512-token classification; project path vs
# transformers.Trainer), a Snakemake run on the GPU and a kill -9 resume; each row in its own process
# (benchmarks/gpu.py says what each row measures; docs/performance.md, "The device run and its plan").
# Usage: bash benchmarks/gpu.sh --plan                  the plan: two commands of at most 8 minutes, kit included
#        bash benchmarks/gpu.sh --command 1|2           one command of the plan
#        bash benchmarks/gpu.sh [--dry] [--only ROW ...] [--budget-s S] [--profile]
# Writes benchmarks/results/gpu[-dry][-cN].json and .md after every row (copied to $OUT/bench when OUT is set);
# each row's output goes to the .log of the same name, the driver's to gpu-main.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
for arg in "$@"; do
  if [ "$arg" = "--plan" ]; then exec "$PY" benchmarks/gpu.py --plan; fi
done
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
  HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
# one on-disk compilation cache for every row and every Snakemake job of the run (TorchInductor's FX graph and
# autotuning caches, Triton's kernels): a graph compiled once is loaded, not compiled, by the next process
CACHE=${CLMDETOUR_COMPILE_CACHE:-${TMPDIR:-/tmp}/clmdetour-compile-cache}
mkdir -p "$CACHE/inductor" "$CACHE/triton"
export TORCHINDUCTOR_CACHE_DIR="$CACHE/inductor" TRITON_CACHE_DIR="$CACHE/triton" TORCHINDUCTOR_FX_GRAPH_CACHE=1 \
  TORCHINDUCTOR_AUTOGRAD_CACHE=1 CLMDETOUR_COMPILE_CACHE="$CACHE"
mkdir -p benchmarks/results
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
# each row is stopped at its own deadline and no row starts past --budget-s; this bound only catches a hung driver
timeout 600 "$PY" benchmarks/gpu.py "$@" 2> benchmarks/results/gpu-main.log
