#!/usr/bin/env bash
# Create .venv and install the pinned stack (CPU or GPU machine, Python 3.11).
# Usage: bash scripts/setup.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
# pip on this kind of machine warns about absent local index folders: hide only those lines.
pipq() {
  local log rc=0
  log=$(mktemp)
  "$PIP" install -q "$@" >"$log" 2>&1 || rc=$?
  grep -v "is ignored: it is neither" "$log" || true
  rm -f "$log"
  return $rc
}
pipq torch==2.14.1 torchvision==0.29.1
pipq -r requirements/base.txt
pipq mosaicml-cli==0.7.5
# Composer goes in with --no-deps, after everything pip resolves: it pins torch<2.7.1 (its API use here works with
# torch 2.14.1: tested), and a resolver step after it would print "ERROR: pip's dependency resolver ..." for its pins.
pipq --no-deps -r requirements/composer.txt
pipq --no-deps -e .
"$VENV/bin/python" -c "import torch, transformers, composer, snakemake; print('installed: torch', torch.__version__, '| transformers', transformers.__version__, '| composer', composer.__version__)"
