"""Run a pipeline on this machine with kfp.local.

- `subprocess` (default): `SubprocessRunner(use_venv=False)`, every step in a subprocess of the current Python,
  so skewgate must be installed here (the demo's virtual environment is).
- `docker`: `DockerRunner`, every step in the component image (`make images`), with host networking — no bridge
  network exists on these machines, and the steps reach MLflow and Triton on 127.0.0.1. kfp.local mounts only
  the pipeline root into the containers, so input files must live under it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Runner = Literal["subprocess", "docker"]


@dataclass(frozen=True)
class LocalRun:
    succeeded: bool  # False when a task failed (a gate blocked, or a step could not evaluate)
    output: str | None  # the pipeline's return value: the deciding step's status
    started_ms: int


def run_locally(pipeline: Callable[..., Any], arguments: Mapping[str, Any], *, pipeline_root: Path,
                log_file: Path | None = None, runner: Runner = "subprocess") -> LocalRun:
    """Run `pipeline` with `arguments`; a blocked gate fails the run (`succeeded=False`) rather than raising.

    kfp.local streams every task's log to stdout; with `log_file` that stream goes to the file instead.
    """
    from kfp import local

    pipeline_root = pipeline_root.resolve()  # DockerRunner mounts it at the same absolute path
    pipeline_root.mkdir(parents=True, exist_ok=True)
    local.init(runner=_runner(runner, pipeline_root), pipeline_root=str(pipeline_root), raise_on_error=False)
    started_ms = int(time.time() * 1000)
    sink = log_file.open("a", encoding="utf-8") if log_file else None
    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        if sink is not None:
            stack.enter_context(sink)
            stack.enter_context(contextlib.redirect_stdout(sink))
        # The subprocess runner warns about any image name without "python" in it, and about display names;
        # it uses neither.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
        task = pipeline(**arguments)
    # kfp.local returns no outputs for a failed run, and the pipeline's return value for a successful one.
    output = task.output if task.outputs else None
    return LocalRun(succeeded=output is not None, output=output, started_ms=started_ms)


def _runner(kind: Runner, pipeline_root: Path) -> Any:
    """Subprocess steps inherit `$SKEWGATE_SIGNING_KEY`; containers see only the pipeline root, so the key is
    copied there (owner-only) and its in-container path passed in the environment."""
    from kfp import local

    if kind == "subprocess":
        return local.SubprocessRunner(use_venv=False)
    environment = {"HOME": "/tmp"}
    key = os.environ.get("SKEWGATE_SIGNING_KEY", "")
    if key:
        inside = pipeline_root / ".signing" / "skewgate.key"
        inside.parent.mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(key, inside)
        inside.chmod(0o600)
        environment["SKEWGATE_SIGNING_KEY"] = str(inside)
    # The host's uid, so that the container can write the mounted pipeline root (on a cluster the image's own
    # non-root user applies); HOME in /tmp, which any uid may write.
    return local.DockerRunner(network_mode="host", user=f"{os.getuid()}:{os.getgid()}", environment=environment)
