"""Everything skewgate says to MLflow: tracking (parent run per pipeline run, ended with the run's outcome by
`finish_pipeline_run`; nested run per step; nightly drift as a series over nights) and the model registry
(versions, evidence tags, aliases, the promotion log; what an alias points at, read). The only package that
imports mlflow — `_client` (errors and deadlines), `tracking`, `registry`, `champions`, `models` — and whose names
are all here; what is written, by name and shape, is in `mlflow_conventions` (pure).

Conventions (DESIGN.md): one experiment per registered model; metrics are `<step>.<check>`; the verdict JSON
and the tensor-stats table are artifacts of the step run. Works the same against `sqlite:///…` (the embedded
default) and a remote server (`MLFLOW_TRACKING_URI`, basic auth via `MLFLOW_TRACKING_USERNAME/PASSWORD`).

Errors: every call into mlflow runs inside `map_errors` (via `Tracking.mapped` / `_mapped`), so a server that
cannot be reached is `Unreachable`, a refusal is `Rejected` (with MLflow's error code, which the few callers that
expect one — "already exists", "does not exist" — test), an answer that contradicts a write is `Inconsistent`,
and skewgate's own errors (a logged verdict that does not parse: `InputError`) pass through unchanged.
"""

from skewgate.common.mlflow_log._client import (
    create_store,
    http_defaults,
    local_store,
    registry_identity,
    require_store,
    retry_until,
)
from skewgate.common.mlflow_log.champions import RegistryChampions, alias_version
from skewgate.common.mlflow_log.models import load_pytorch_model, onnx_external_data, onnx_signature
from skewgate.common.mlflow_log.registry import (
    STALE_RUN_AFTER_S,
    MlflowRegistry,
    end_stale_runs,
    process_gone,
    process_identity,
)
from skewgate.common.mlflow_log.tracking import (
    StepRun,
    Tracking,
    connect,
    finish_pipeline_run,
    log_drift_night,
    runs_table_link,
)

__all__ = [
    "STALE_RUN_AFTER_S", "MlflowRegistry", "RegistryChampions", "StepRun", "Tracking", "alias_version", "connect",
    "create_store", "end_stale_runs", "finish_pipeline_run", "http_defaults", "load_pytorch_model", "local_store",
    "log_drift_night", "onnx_external_data", "onnx_signature", "process_gone", "process_identity",
    "registry_identity", "require_store", "retry_until", "runs_table_link",
]
