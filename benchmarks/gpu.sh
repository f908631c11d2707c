#!/usr/bin/env bash
# GPU benchmark (one H100/H200, at most 8 minutes): phase-1 CLM with sdpa; phase-1 CLM and decay MLM
# with FlexAttention + torch.compile at the planner's micro-batch; transformers.Trainer MLM as the
# reference: tokens/s, MFU, peak GiB and the ratio to the Trainer row (docs/performance.md, GPU path).
# Usage: bash benchmarks/gpu.sh [--dry] [--profile] [extra args of benchmarks/gpu.py]
# Writes benchmarks/results/gpu.json (+ gpu-profile.txt with --profile); the log goes to benchmarks/results/gpu.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi; fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
mkdir -p benchmarks/results
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
timeout 480 "$PY" benchmarks/gpu.py "$@" 2> benchmarks/results/gpu.log
