#!/usr/bin/env bash
# Compile the pipelines a KFP UI user uploads (`make compile`): the release gate, the nightly drift check and its
# fan-out, with the Secret names the deployment guide creates (docs/design.md): `skewgate-signing-key` (the signing
# key) and `mlflow-credentials` (MLflow's username and password). The image is $SKEWGATE_IMAGE (default
# skewgate:<version>), pinned by $SKEWGATE_IMAGE_DIGEST when set: recompile with yours. tests/pipelines/test_shipped.py
# holds the checked-in files equal to what this writes at the defaults.
#
#   pipelines/compile.sh [OUT_DIR]      (default: this folder; $SKEWGATE: the skewgate command, default .venv/bin/skewgate)
set -euo pipefail
out="${1:-$(dirname "$0")}"
skewgate="${SKEWGATE:-.venv/bin/skewgate}"
secrets=(--mlflow-secret mlflow-credentials)
"$skewgate" pipeline compile --pipeline release-gate --signing-secret skewgate-signing-key "${secrets[@]}" \
    --out "$out/release_gate.yaml"
"$skewgate" pipeline compile --pipeline nightly-drift "${secrets[@]}" --out "$out/nightly_drift.yaml"
"$skewgate" pipeline compile --pipeline nightly-drift-fanout "${secrets[@]}" --out "$out/nightly_drift_fanout.yaml"
