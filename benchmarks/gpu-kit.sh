#!/usr/bin/env bash
# Wheels for running benchmarks/gpu.sh on a bare GPU machine that has its own torch (seen: Python 3.12,
# torch 2.11, transformers 5.17, no Composer, no datasets) and no network. The pinned torch 2.14 is not
# carried (too large); the training path uses only APIs that torch 2.5+ has.
#   bash benchmarks/gpu-kit.sh fetch     # here, with PyPI: wheels into .gpu-wheels/ (+ .gpu-wheels/run.sh)
#   bash .gpu-wheels/run.sh [--dry]      # there, in the checkout: private site folder, then the benchmark
# .gpu-wheels/ is untracked and not ignored, so a checkout copied to the GPU machine carries it.
# Versions: the project's pins (requirements/base.txt, requirements/composer.txt) for what torch does not
# bring; PY_VERSION (default 3.12) must match the GPU machine's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = fetch ] || { echo "usage: bash benchmarks/gpu-kit.sh fetch" >&2; exit 2; }
pin() { grep -hE "^$1==" requirements/base.txt requirements/composer.txt | head -1; }
w=.gpu-wheels
mkdir -p "$w"
# pyarrow and pandas (66 MB together) are left out: a GPU machine with torch has had them, and the carried
# working tree must stay under 64 MiB; add them with KIT_EXTRA="pyarrow pandas" where they are missing.
wanted=(transformers tokenizers datasets huggingface_hub safetensors accelerate hf-xet dill multiprocess xxhash
        fsspec ${KIT_EXTRA:-})
pkgs=()
for p in "${wanted[@]}"; do v=$(pin "$p" || true); pkgs+=("${v:-$p}"); done
pkgs+=($(grep -hvE '^\s*#|^\s*$' requirements/composer.txt))
py=${PY:-python3}
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --platform any -d "$w" "${pkgs[@]}"
cat > "$w/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine, in the checkout: install the carried wheels into a private folder (the machine's
# own torch stays), put it and the project's source first on the path, and run the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(mktemp -d)
python3 -m pip install -q --no-deps --no-index --target "$site" .gpu-wheels/*.whl
export PYTHONPATH="$site:$PWD/src:$PWD:${PYTHONPATH:-}"
python3 -c "import torch, transformers, composer, datasets; print('torch', torch.__version__, 'transformers', transformers.__version__, 'composer', composer.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
PYTHON=python3 bash benchmarks/gpu.sh --profile "$@"
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/bench" && cp -r benchmarks/results/. "$OUT/bench/"; fi
RUN
chmod +x "$w/run.sh"
du -sh "$w"
