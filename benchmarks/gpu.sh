#!/usr/bin/env bash
# GPU benchmark (one H100/H200): phase-1 CLM and decay MLM throughput and MFU of the
# 150M base configuration at 8,192 tokens, sdpa and flash-attention-2 (when installed),
# plus the transformers.Trainer reference with sdpa. About 4-6 minutes on one H100/H200.
# Usage: benchmarks/gpu.sh [--dry] [extra args of benchmarks/gpu.py]
# Writes benchmarks/results/gpu.json; the log goes to benchmarks/results/gpu.log.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
mkdir -p benchmarks/results
python -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
timeout 470 python benchmarks/gpu.py --reference "$@" 2> benchmarks/results/gpu.log
