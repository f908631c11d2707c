#!/usr/bin/env bash
# GPU benchmark of the paper run's GPU half (one H100/H200, at most 8 minutes with the kit's install): pretraining
# (phase-1 CLM and decay MLM, FlexAttention + torch.compile at the planner's micro-batch; transformers.Trainer as the
# reference), fine-tuning grid jobs (8,192-token NER and document classification, 512-token classification; project
# path vs transformers.Trainer), a Snakemake run on the GPU and a kill -9 resume; each row in its own process
# (benchmarks/gpu.py says what each row measures; docs/performance.md, "GPU path").
# Usage: bash benchmarks/gpu.sh [--dry] [--profile] [--budget-s S] [--only ROW ...]
# Writes benchmarks/results/gpu.json and gpu.md after every row (gpu-dry.* with --dry; copied to $OUT/bench when
# OUT is set); each row's output goes to benchmarks/results/gpu.log, the driver's to gpu-main.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
  HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
mkdir -p benchmarks/results
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
# the driver stops starting rows at --budget-s (default 450 s); this bound only catches a hung driver
timeout 560 "$PY" benchmarks/gpu.py "$@" 2> benchmarks/results/gpu-main.log
