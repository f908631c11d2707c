#!/usr/bin/env bash
# The GPU wheel kit: wheels for running benchmarks/gpu.sh on a bare GPU machine that has its own torch (seen:
# Python 3.12, torch 2.11, no network, no package index). docs/performance.md, "The GPU kit".
#   bash benchmarks/gpu-kit.sh record    # here: re-record benchmarks/gpu-kit.txt from `gpu.sh --dry`'s imports
#   bash benchmarks/gpu-kit.sh check     # here: every import of the code is carried or PROVIDED (exit 1 if not)
#   bash benchmarks/gpu-kit.sh fetch     # here, with PyPI: the kit's wheels into .gpu-wheels/ (+ run.sh, pins.txt)
#   bash benchmarks/gpu-kit.sh rehearse [gpu.sh args]  # here: a bare-GPU-like Python 3.12 venv runs run.sh --dry:
#                                                      # without args, each command of the plan, then the rows left out
#   bash .gpu-wheels/run.sh [--dry]      # there, in the checkout: checks, private site folder, then the benchmark
# What is carried: benchmarks/gpu-kit.txt (written by `python benchmarks/kit.py record`), at the versions of
# .venv (what CI tests). What is not: PROVIDED in benchmarks/kit.py (torch, numpy, pandas, pyarrow, ...), which
# run.sh checks on the machine first. .gpu-wheels/ is untracked and not ignored, so a copied checkout carries it.
# Environment: KIT_PY (python with the project installed, default .venv/bin/python), PY_VERSION (the GPU
# machine's Python, default 3.12), PY312 (the rehearsal's interpreter, default /root/.pyenv/versions/3.12.1/bin/python),
# REHEARSE_VENV (default .venv-rehearse, git-ignored). The kit must stay under 48 MB (the copied tree < 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
KIT_PY=${KIT_PY:-.venv/bin/python}
w=.gpu-wheels
MAX_KIT_MB=${KIT_MAX_MB:-48}

# pip prints warnings about absent local index folders on this kind of machine: hide only those lines
quiet_pip() { grep -v "is ignored: it is neither" || true; }
# run pip with $KIT_PY or another python ($1), its output filtered; keeps pip's exit status
pip_run() { local py=$1 log rc=0; shift; log=$(mktemp); "$py" -m pip "$@" >"$log" 2>&1 || rc=$?; quiet_pip <"$log"; rm -f "$log"; return $rc; }

fetch() {
  local pins tmp failed=() p
  pins=$("$KIT_PY" benchmarks/kit.py pins)
  tmp=$(mktemp -d "$PWD/.gpu-wheels.new.XXXXXX")
  trap 'rm -rf "${tmp:-}"; trap - RETURN' RETURN
  local args=(download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp
              -d "$tmp")
  for n in 5 17 24 27 28 31 34; do args+=(--platform "manylinux_2_${n}_x86_64"); done
  args+=(--platform any)
  # shellcheck disable=SC2086
  if ! pip_run "$KIT_PY" "${args[@]}" $pins >/dev/null 2>&1; then
    # one by one; a pin with no wheel on PyPI (sdist only) is built here, kept only if pure Python (none-any)
    for p in $pins; do
      pip_run "$KIT_PY" "${args[@]}" "$p" >/dev/null 2>&1 && continue
      local built; built=$(mktemp -d)
      if pip_run "$KIT_PY" wheel -q --no-deps -w "$built" "$p" >/dev/null 2>&1 && ls "$built"/*-none-any.whl >/dev/null 2>&1; then
        mv "$built"/*-none-any.whl "$tmp"/ && echo "gpu-kit fetch: $p has no wheel on the index; built a pure-Python one"
      else
        failed+=("$p")
      fi
      rm -rf "$built"
    done
    if [ ${#failed[@]} -gt 0 ]; then
      echo "gpu-kit fetch: no Python ${PY_VERSION:-3.12} manylinux/any wheel for: ${failed[*]}" >&2
      return 1
    fi
  fi
  "$KIT_PY" benchmarks/kit.py slim "$tmp"
  printf '%s\n' $pins > "$tmp/pins.txt"
  write_run_sh > "$tmp/run.sh"
  chmod +x "$tmp/run.sh"
  local n_wheels bytes
  n_wheels=$(find "$tmp" -name '*.whl' | wc -l)
  bytes=$(find "$tmp" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  echo "gpu-kit fetch: $n_wheels wheels, $(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}') MB; the largest:"
  # awk reads the whole list (head would close the pipe early: SIGPIPE, exit 141 under pipefail)
  find "$tmp" -name '*.whl' -printf '%s %f\n' | sort -rn | awk 'NR <= 5 {printf "  %5.1f MB %s\n", $1 / 1e6, $2}'
  if [ "$bytes" -gt $((MAX_KIT_MB * 1000000)) ]; then
    echo "gpu-kit fetch: the kit is over $MAX_KIT_MB MB (KIT_MAX_MB): the copied checkout must stay under 64 MiB;" \
         "$w/ left as it was" >&2
    return 1
  fi
  rm -rf "$w" && mv "$tmp" "$w"
  echo "gpu-kit fetch: written to $w/ (run there: bash $w/run.sh)"
}

write_run_sh() {
  cat <<'RUN'
#!/usr/bin/env bash
# Written by `bash benchmarks/gpu-kit.sh fetch`. On the GPU machine, in the checkout (no network needed):
#   bash .gpu-wheels/run.sh [gpu.sh args, e.g. --dry]      PYTHON=... picks the interpreter (default python3)
# Checks the image's PROVIDED packages (benchmarks/kit.py), installs the carried wheels into a private folder
# (the machine's own torch stays), puts it and the project's source first on the path, checks that the carried
# versions win and the main packages import, runs benchmarks/gpu.sh, and copies its results to $OUT/bench.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" benchmarks/kit.py verify
"$PY" benchmarks/kit.py shadows --pins .gpu-wheels/pins.txt   # what the kit replaces, both versions
site=$(mktemp -d)
log=$(mktemp)
if ! "$PY" -m pip install -q --no-deps --no-index --target "$site" .gpu-wheels/*.whl >"$log" 2>&1; then
  grep -v "is ignored: it is neither" "$log" >&2 || true
  echo "run.sh: installing the carried wheels into $site failed" >&2; exit 1
fi
export PYTHONPATH="$site:$PWD/src:$PWD:${PYTHONPATH:-}"
"$PY" benchmarks/kit.py smoke --pins .gpu-wheels/pins.txt
rc=0
PYTHON="$PY" bash benchmarks/gpu.sh "$@" || rc=$?
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/bench" && cp -r benchmarks/results/. "$OUT/bench/"; fi
exit "$rc"
RUN
}

rehearse() {
  local py312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python} venv=${REHEARSE_VENV:-.venv-rehearse}
  [ -x "$venv/bin/python" ] || "$py312" -m venv "$venv"
  "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version'
  # the GPU image's torch (a CUDA build; it imports and runs on the CPU) and the rest of PROVIDED, nothing else
  # shellcheck disable=SC2046
  pip_run "$venv/bin/python" install -q $("$KIT_PY" benchmarks/kit.py provided --rehearse) \
    || { echo "gpu-kit rehearse: installing PROVIDED into $venv failed" >&2; return 1; }
  if "$venv/bin/python" -c 'import clmdetour' 2>/dev/null; then
    echo "gpu-kit rehearse: $venv has the project installed; a bare GPU machine does not" >&2; return 1
  fi
  [ -f "$w/run.sh" ] || fetch
  if [ $# -gt 0 ]; then PYTHON="$PWD/$venv/bin/python" bash "$w/run.sh" --dry "$@"; return; fi
  # the plan's commands in order, each row with the deadline the plan gives it, then the rows it leaves out
  local n rc=0 left
  for n in $("$KIT_PY" benchmarks/gpu_plan.py commands); do
    echo "=== gpu-kit rehearse: command $n of the plan (--dry)"
    PYTHON="$PWD/$venv/bin/python" bash "$w/run.sh" --dry --command "$n" || rc=1
  done
  left=$("$KIT_PY" benchmarks/gpu_plan.py left-out)
  if [ -n "$left" ]; then
    echo "=== gpu-kit rehearse: rows the plan leaves out (--dry)"
    # shellcheck disable=SC2086
    PYTHON="$PWD/$venv/bin/python" bash "$w/run.sh" --dry --only $left || rc=1
  fi
  return $rc
}

case "${1:-}" in
  record) shift  # default command: bash benchmarks/gpu.sh --dry (the CPU dry run of every GPU entry point)
    if [ $# -gt 0 ]; then exec "$KIT_PY" benchmarks/kit.py record --out benchmarks/gpu-kit.txt -- "$@"; fi
    exec "$KIT_PY" benchmarks/kit.py record --out benchmarks/gpu-kit.txt ;;
  check) exec "$KIT_PY" benchmarks/kit.py check ;;
  fetch) fetch ;;
  rehearse) shift; rehearse "$@" ;;
  *) echo "usage: bash benchmarks/gpu-kit.sh record|check|fetch|rehearse [args]" >&2; exit 2 ;;
esac
