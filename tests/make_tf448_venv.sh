#!/usr/bin/env bash
# Build .venv-tf448: transformers 4.48.0 (the oldest version the release promises
# to load with) layered over the main virtual environment, without reinstalling torch.
#
# Layout: .venv-tf448/lib/pythonX.Y/site-packages holds transformers 4.48.0 and
# the tokenizers / huggingface_hub / safetensors versions it was released with;
# a .pth file there appends the main venv's site-packages to sys.path AFTER the
# venv's own, so torch / numpy / requests ... come from the main venv while the
# pinned packages take precedence.
#
# Usage: tests/make_tf448_venv.sh [VENV_DIR]   (default: <repo>/.venv-tf448)
#   MAIN_PYTHON=/path/to/python  the main environment's interpreter
#                                (default: <repo>/.venv/bin/python, else python3)
# Idempotent: a stamp file records the pinned set; a second run with the same pins
# returns at once. Prints the venv's python path on its last line of stdout.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-tf448}"
if [[ -n "${MAIN_PYTHON:-}" ]]; then
    main_py="$MAIN_PYTHON"
elif [[ -x "$repo/.venv/bin/python" ]]; then
    main_py="$repo/.venv/bin/python"
else
    main_py="$(command -v python3)"
fi

# transformers 4.48.0 (2025-01-10) with the releases of its dependencies current then.
pins=(transformers==4.48.0 tokenizers==0.21.0 huggingface_hub==0.27.1 safetensors==0.5.2)
stamp="$venv/.clmdetour-pins"
main_site="$("$main_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
want="${pins[*]} | $main_site"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

# One builder at a time (parallel test processes); the second one then finds the stamp.
if command -v flock >/dev/null 2>&1; then
    exec 9>"${TMPDIR:-/tmp}/clmdetour-tf448-$(id -u).lock"
    flock 9
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
        echo "$venv/bin/python"
        exit 0
    fi
fi

rm -rf "$venv"
# --without-pip: skip ensurepip (seconds); the main environment's pip installs into it.
"$main_py" -m venv --without-pip "$venv"
venv_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# --no-deps: everything else (torch, numpy, requests, pyyaml, regex, tqdm ...) is the main venv's.
# Installed before the .pth exists, so pip sees an empty environment and touches nothing else.
"$main_py" -m pip --python "$venv/bin/python" install --quiet --no-deps --disable-pip-version-check "${pins[@]}" >&2
# The site module processes .pth files after adding the directory that holds them,
# so the main site-packages lands after the venv's own on sys.path.
echo "$main_site" > "$venv_site/zz-clmdetour-main-venv.pth"
"$venv/bin/python" - <<'PY' >&2
import transformers, tokenizers, huggingface_hub, safetensors, torch
assert transformers.__version__ == "4.48.0", transformers.__version__
assert tokenizers.__version__ == "0.21.0", tokenizers.__version__
print(f"tf448 venv: transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
      f"huggingface_hub {huggingface_hub.__version__}, torch {torch.__version__} (from {torch.__file__})")
PY
echo "$want" > "$stamp"
echo "$venv/bin/python"
