"""On a cluster the pipeline's signing key is a Kubernetes Secret, mounted read-only into the pods of the steps
that sign (every gate and promote) and named to them by `$SKEWGATE_SIGNING_KEY` — never a pipeline parameter,
which anyone who can read the run could see. The Secret's name is fixed at compile time
(`skewgate pipeline compile --signing-secret NAME`, or `$SKEWGATE_SIGNING_SECRET`; the chart sets it)."""

from __future__ import annotations

import os
from typing import Any

SIGNING_SECRET_ENV = "SKEWGATE_SIGNING_SECRET"
MOUNT_PATH = "/var/run/secrets/skewgate-signing"
KEY_FILE = "skewgate.key"  # the key the Secret must hold (what `skewgate keys generate` writes)
SIGNING_STEPS = frozenset({"export", "calibrate", "drift", "parity", "probe", "compare", "estimate", "promote"})


def signing_secret(explicit: str | None = None) -> str:
    return explicit if explicit is not None else os.environ.get(SIGNING_SECRET_ENV, "")


def mount_signing_key(task: Any, step: str, secret_name: str) -> Any:
    """Mount `secret_name` into `task` when `step` signs; a step that does not sign never sees the key."""
    if secret_name and step in SIGNING_STEPS:
        from kfp import kubernetes

        kubernetes.use_secret_as_volume(task, secret_name=secret_name, mount_path=MOUNT_PATH)
        task.set_env_variable("SKEWGATE_SIGNING_KEY", f"{MOUNT_PATH}/{KEY_FILE}")
    return task
