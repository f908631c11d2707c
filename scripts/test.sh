#!/usr/bin/env bash
# Install everything (scripts/setup.sh) and run the whole test suite, printing the wall time of each stage.
# Usage: bash scripts/test.sh            (what .ci/run calls)
#        SKIP_INSTALL=1 bash scripts/test.sh   (reuse an existing .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
T0=$(date +%s)
stage() { echo; echo "=== stage: $1 ($(date -u +%H:%M:%S))"; STAGE_T=$(date +%s); }
done_stage() { echo "=== stage $1: $(( $(date +%s) - STAGE_T )) s wall"; TIMES+=("$1: $(( $(date +%s) - STAGE_T )) s"); }
TIMES=()

if [ -z "${SKIP_INSTALL:-}" ]; then
  stage install
  bash scripts/setup.sh .venv
  bash tests/make_tf448_venv.sh            # transformers 4.48.0 beside the main venv (release compatibility test)
  if [ -z "${SKIP_SLURM:-}" ] && [ "$(id -u)" -eq 0 ]; then
    bash tests/slurm/install_slurm.sh || echo "SLURM packages could not be installed: the SLURM tests will skip"
  fi
  done_stage install
fi
PY=.venv/bin/python
RC=0
run_pytest() {  # name, pytest args...
  local name=$1; shift
  stage "$name"
  local rc=0
  "$PY" -m pytest -p no:cacheprovider --durations=25 "$@" || rc=$?  # the 25 slowest tests, to watch the stage budgets
  [ $rc -eq 5 ] && rc=0   # no test collected in this stage (e.g. all skipped by marker) is not a failure
  [ $rc -ne 0 ] && RC=$rc
  done_stage "$name"
}
stage "unit tests: linters"
# ruff's default rule set (config: pyproject.toml) and snakefmt on the workflow files
.venv/bin/ruff check . || RC=1
.venv/bin/snakefmt --check Snakefile workflow/rules || RC=1
done_stage "unit tests: linters"
run_pytest "unit tests" -q -m "not slow and not slurm"
run_pytest "workflow: demo DAG + real input (slow)" -q -m "slow and not slurm"
if [ -z "${SKIP_SLURM:-}" ]; then
  run_pytest "SLURM" -q -m "slurm"
fi
echo
echo "=== wall time per stage"
printf '  %s\n' "${TIMES[@]}"
echo "  total: $(( $(date +%s) - T0 )) s"
exit $RC
