"""On a cluster the MLflow credentials are a Kubernetes Secret (keys `username`, `password`, the chart's
`mlflow.credentialsSecret`), handed to the pods of the steps that talk to MLflow as `$MLFLOW_TRACKING_USERNAME` /
`$MLFLOW_TRACKING_PASSWORD` — never pipeline parameters, which anyone who can read the run could see. The
Secret's name is fixed at compile time (`skewgate pipeline compile --mlflow-secret NAME`, or
`$SKEWGATE_MLFLOW_SECRET`; the chart sets it for its schedule Job)."""

from __future__ import annotations

import os
from typing import Any

MLFLOW_SECRET_ENV = "SKEWGATE_MLFLOW_SECRET"
SECRET_KEY_TO_ENV = {"username": "MLFLOW_TRACKING_USERNAME", "password": "MLFLOW_TRACKING_PASSWORD"}
# The steps whose pods log to MLflow or read its registry; the blocked steps and the shards' statistics do not.
MLFLOW_STEPS = frozenset({"export", "calibrate", "drift", "parity", "probe", "compare", "estimate", "promote",
                          "finish", "nightly-drift", "nightly-drift-plan"})


def mlflow_secret(explicit: str | None = None) -> str:
    return explicit if explicit is not None else os.environ.get(MLFLOW_SECRET_ENV, "")


def mount_mlflow_credentials(task: Any, step: str, secret_name: str) -> Any:
    """Expose `secret_name`'s username and password to `task` when `step` talks to MLflow."""
    if secret_name and step in MLFLOW_STEPS:
        from kfp import kubernetes

        kubernetes.use_secret_as_env(task, secret_name=secret_name, secret_key_to_env=dict(SECRET_KEY_TO_ENV))
    return task
