#!/usr/bin/env bash
# Create .venv and install the pinned stack (CPU or GPU machine, Python 3.11). The one list of pins:
# requirements/*.txt (environment.yml and the Containerfile install the same: the Containerfile runs this script).
# Usage: bash scripts/setup.sh [VENV_DIR]
#   CLMDETOUR_TORCH_CUDA=cu126|cu128|cu130|cpu   the PyTorch build to install (default: PyPI's, the CUDA 13.0
#                                                build on x86_64, which needs an NVIDIA driver R580+); the others
#                                                come from https://download.pytorch.org/whl/<build> (docs/slurm.md,
#                                                "The driver and the PyTorch build"); recorded in VENV/torch-build.txt
#                                                only once torch.version.cuda is checked to be that build's
#   CLMDETOUR_TORCH_INDEX=URL                    where those builds' folders are (default
#                                                https://download.pytorch.org/whl; a site mirror)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${CLMDETOUR_TORCH_CUDA:-}" in
  ""|cu126|cu128|cu130|cpu) ;;
  *) echo "setup.sh: CLMDETOUR_TORCH_CUDA=$CLMDETOUR_TORCH_CUDA: expected cu126, cu128, cu130 or cpu (or unset:" \
          "PyPI's build); docs/slurm.md, 'The driver and the PyTorch build'" >&2
     exit 2 ;;
esac
VENV="${1:-.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
BUILD="${CLMDETOUR_TORCH_CUDA:-}"
INDEX="${CLMDETOUR_TORCH_INDEX:-https://download.pytorch.org/whl}/$BUILD"
if [ -n "$BUILD" ]; then
  # Before anything is installed: pip would otherwise fall back to another source's torch (PyPI's CUDA 13.0
  # build, or a local wheel) and install a build that was not asked for.
  if ! "$PY" - "$INDEX/torch/" <<'PYEOF' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(urllib.request.Request(sys.argv[1], method="HEAD"), timeout=20)
PYEOF
    echo "setup.sh: CLMDETOUR_TORCH_CUDA=$BUILD needs the PyTorch index $INDEX, which cannot be reached from" \
         "here: nothing installed (make it reachable, set CLMDETOUR_TORCH_INDEX to a mirror, or leave" \
         "CLMDETOUR_TORCH_CUDA unset for PyPI's build)" >&2
    exit 1
  fi
fi
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
case "$BUILD" in
  "") pipq -r requirements/torch.txt ;;
  cu126|cu128|cu130|cpu) pipq -r requirements/torch.txt --index-url "$INDEX" ;;
esac
pipq -r requirements/base.txt
pipq -r requirements/tools.txt
# Composer goes in with --no-deps, after everything pip resolves: it pins torch<2.7.1 (its API use here works with
# torch 2.14.1: tested), and a resolver step after it would print "ERROR: pip's dependency resolver ..." for its pins.
pipq --no-deps -r requirements/composer.txt
pipq --no-deps -e .
"$VENV/bin/python" -c "import torch, transformers, composer, snakemake; print('installed: torch', torch.__version__, '| transformers', transformers.__version__, '| composer', composer.__version__)"
# the build installed, checked against the one asked for (clmdetour.runtime.driver.build_mismatch), then recorded
# for the driver check and for a person reading the venv; a mismatch records nothing and stops in one line
rm -f "$VENV/torch-build.txt"
"$VENV/bin/python" -m clmdetour.runtime.driver verify-build "$BUILD" "$INDEX"
"$VENV/bin/python" -c "import torch; print('requested=${BUILD:-pypi}', 'torch=' + torch.__version__, 'cuda=' + str(torch.version.cuda))" \
  > "$VENV/torch-build.txt"
