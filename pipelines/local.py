"""Run a pipeline on this machine with `kfp.local.SubprocessRunner(use_venv=False)`: every step runs in a
subprocess of the current Python, so skewgate must be installed here (the demo's virtual environment is)."""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalRun:
    succeeded: bool
    started_ms: int
    pipeline_root: Path


def run_release_gate_locally(
    *,
    candidate_model: Path,
    eval_data: Path,
    model_name: str,
    tracking_uri: str,
    pipeline_root: Path,
    alias: str = "champion",
    allow_warn: bool = False,
    log_file: Path | None = None,
) -> LocalRun:
    """Run `release_gate`; a refused promotion fails the run (`succeeded=False`) rather than raising.

    kfp.local streams every task's log to stdout; with `log_file` that stream goes to the file instead.
    """
    from kfp import local

    from skewgate.pipelines.release_gate import release_gate

    pipeline_root.mkdir(parents=True, exist_ok=True)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root),
               raise_on_error=False)
    started_ms = int(time.time() * 1000)
    sink = log_file.open("a", encoding="utf-8") if log_file else None
    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        if sink is not None:
            stack.enter_context(sink)
            stack.enter_context(contextlib.redirect_stdout(sink))
        # The subprocess runner warns about any image name without "python" in it; it never uses the image.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
        task = release_gate(candidate_model=str(candidate_model.resolve()), eval_data=str(eval_data.resolve()),
                            model_name=model_name, mlflow_tracking_uri=tracking_uri, alias=alias,
                            allow_warn=allow_warn)
    # kfp.local returns no outputs for a failed run, and the promote status for a successful one.
    succeeded = bool(task.outputs) and task.output == "pass"
    return LocalRun(succeeded=succeeded, started_ms=started_ms, pipeline_root=pipeline_root)
