#!/usr/bin/env bash
# Collect every wheel the image installs into one folder, so that `docker build` needs no network: the project
# with all its extras and the CPU torch build, and — resolved apart, as it pins numpy<2 — the Triton wheel and
# its Python backend's packages (named once, in skewgate.common.triton.server). Usage: docker/wheelhouse.sh DIR [PIP]
set -euo pipefail
dir=${1:?usage: wheelhouse.sh DIR [PIP]}
pip=${2:-.venv/bin/pip}
python=$(dirname "$pip")/python
mkdir -p "$dir"
"$pip" wheel --quiet --wheel-dir "$dir" '.[all]' 'torch==2.13.0'
"$pip" wheel --quiet --no-deps --wheel-dir "$dir" "$("$python" -c 'from skewgate.common.triton.server import WHEEL; print(WHEEL)')"
mapfile -t backend < <("$python" -c 'from skewgate.common.triton.server import BACKEND_PACKAGES; print(*BACKEND_PACKAGES, sep="\n")')
"$pip" wheel --quiet --wheel-dir "$dir" "${backend[@]}"
du -sh "$dir" >&2
