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

from skewgate.common.steps import RELEASE_GATE_STEPS
from skewgate.common.verdict import Verdict

Runner = Literal["subprocess", "docker"]
VERDICT_OUTPUT = "verdict"  # the name every step's component gives its verdict output


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


def run_verdicts(pipeline_root: Path, started_ms: int) -> dict[str, Verdict]:
    """The verdicts of the local run that started at `started_ms` under `pipeline_root`, by step, read from its
    tasks' `verdict` outputs (kfp.local writes `<root>/<pipeline>-<time>/<task>/verdict`); a task whose verdict was
    never written (it crashed) is absent."""
    runs = [d for d in pipeline_root.iterdir()
            if d.is_dir() and not d.name.startswith(".") and d.stat().st_mtime * 1000 >= started_ms - 1000]
    if not runs:
        return {}
    newest = max(runs, key=lambda d: d.stat().st_mtime)
    verdicts = {}
    for output in sorted(newest.glob(f"*/{VERDICT_OUTPUT}")):
        if output.is_file() and output.stat().st_size:
            verdict = Verdict.read(output)
            verdicts[verdict.step] = verdict
    return verdicts


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verdict_table(verdicts: Mapping[str, Verdict]) -> str:
    """One line per step in the pipeline's order: its status and why (for a failed or warned step, the check that
    decided first, then its warnings); the full verdicts are in MLflow and the run's outputs."""
    if not verdicts:
        return "  (no verdicts recorded)"
    rows = [("step", "status", "why")]
    # the pipeline's order, not the order the steps happened to finish
    order = [*RELEASE_GATE_STEPS, "estimate", "promote", "nightly-drift", "nightly-estimate"]
    for step, verdict in sorted(verdicts.items(), key=lambda item: [*order, item[0]].index(item[0])):
        why = verdict.message
        if verdict.status in {"fail", "warn"} and step != "promote":
            decided = sorted(verdict.failed_checks, key=lambda c: c.severity != "fail")
            why = "; ".join(f"{c.name}: {_short(c.detail)}" for c in decided)
        rows.append((step, verdict.status.upper(), why))
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    return "\n".join(f"  {r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}" for r in rows)
