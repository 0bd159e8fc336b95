"""Run a pipeline on this machine with `kfp.local.SubprocessRunner(use_venv=False)`: every step runs in a
subprocess of the current Python, so skewgate must be installed here (the demo's virtual environment is)."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LocalRun:
    succeeded: bool  # False when a task failed (a gate blocked, or a step could not evaluate)
    output: str | None  # the pipeline's return value: the deciding step's status
    started_ms: int


def run_locally(pipeline: Callable[..., Any], arguments: Mapping[str, Any], *, pipeline_root: Path,
                log_file: Path | None = None) -> LocalRun:
    """Run `pipeline` with `arguments`; a blocked gate fails the run (`succeeded=False`) rather than raising.

    kfp.local streams every task's log to stdout; with `log_file` that stream goes to the file instead.
    """
    from kfp import local

    pipeline_root.mkdir(parents=True, exist_ok=True)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root),
               raise_on_error=False)
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
