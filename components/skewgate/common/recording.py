"""Evaluate a step and record its verdict in MLflow: what every step's `run` (run.py, which its CLI and its KFP
component call) does around its evaluation.

Whatever happens, a `Verdict` comes back: an exception during evaluation becomes status `error` (could not
evaluate), and so does a failure to record it (an unrecorded verdict must not count as evidence).

A verdict is signed with where it was recorded (`attest.RunContext`: the pipeline run id, the step's MLflow run id,
the time), once: `evaluate_and_record` returns it with that envelope (`StepResult`), so the envelope the CLI writes
beside `--report` and the one the KFP component outputs are byte for byte the one logged in the step run.

Every step run also shows how the step was set up and what it read: its settings as params (logged before it
evaluates, so a step that errors shows them too) and its inputs as datasets (from the verdict's subject, located
by path where the step's inputs are known). Each step's `run.py` passes both: `settings`, its options dataclass,
and `inputs`, its input paths by the names its verdict's subject gives their digests.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from skewgate.common.errors import InputError, SkewgateError
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.attest import RunContext
    from skewgate.common.mlflow_log import StepRun

log = logging.getLogger(__name__)
Evaluate = Callable[["StepRun | None"], Verdict]


@dataclass(frozen=True)
class TrackingOptions:
    """Where to record: an MLflow URI (empty: nowhere), the experiment, and the pipeline run to nest under."""

    uri: str = ""
    experiment: str = "skewgate"
    pipeline_run_id: str = ""
    deadline_s: float = 30.0
    signing_key: str = ""  # empty: $SKEWGATE_SIGNING_KEY, or no signature when that is unset too


@dataclass(frozen=True)
class StepResult:
    """What every step's `run` returns: its verdict and the verdict's signed DSSE envelope (None when no signing
    key is configured, or for an `error` verdict or one about no artifact, which are never evidence). The CLI
    writes both beside `--report`; the KFP component outputs both."""

    verdict: Verdict
    envelope: dict[str, Any] | None = None

    @classmethod
    def unrecorded(cls, verdict: Verdict, signing_key: str = "") -> StepResult:
        """A verdict recorded nowhere (verify only reads), signed without a run context when a key is set."""
        return cls(verdict, sign_verdict(verdict, signing_key))


@contextlib.contextmanager
def _step_run(step: str, tracking: TrackingOptions) -> Iterator[StepRun | None]:
    if not tracking.uri:
        yield None
        return
    from skewgate.common import mlflow_log

    connection = mlflow_log.connect(tracking.uri, experiment=tracking.experiment, deadline_s=tracking.deadline_s)
    with connection.step_run(step, pipeline_run_id=tracking.pipeline_run_id or None) as run:
        yield run


def evaluate_and_record(step: str, evaluate: Evaluate, tracking: TrackingOptions, *, settings: Any = None,
                        inputs: Mapping[str, str | PurePath | None] | None = None) -> StepResult:
    """`evaluate` inside the step's MLflow run (when `tracking` has a URI), its verdict recorded there. `settings`
    (the step's options dataclass, or a mapping; None: no params) become the run's params and `inputs` (name →
    path, by the names the verdict's subject gives their digests; an input not given is None) locate its
    datasets. The envelope comes back only with the verdict it was logged with: an error while recording
    replaces both. An ad-hoc call (no pipeline run) whose local input does not exist is an `error` at once,
    recorded nowhere: a mistyped path is not a run for the experiment to keep."""
    verdict: Verdict | None = None
    missing = _missing_local_input(inputs or {}) if tracking.uri and not tracking.pipeline_run_id else None
    if missing is not None:
        return StepResult(Verdict.error(step, str(missing)))
    try:
        with _step_run(step, tracking) as run:
            if run is not None:
                run.input_paths.update({k: str(v) for k, v in (inputs or {}).items() if v is not None and str(v)})
                if settings is not None:
                    run.log_settings(settings)
            try:
                verdict = evaluate(run)
            except SkewgateError as err:
                verdict = Verdict.error(step, str(err))
            except Exception as err:  # a bug or an unexpected library error: still "could not evaluate" (fail
                # closed), and loud: the traceback is what a bug report needs
                log.error("%s: unexpected %s (a bug, please report it with this traceback)", step,
                          type(err).__name__, exc_info=True)
                verdict = Verdict.error(step, f"{type(err).__name__}: {err}")
            envelope = sign_verdict(verdict, tracking.signing_key, context=_context(tracking, run))
            if run is not None:
                run.log_verdict(verdict, envelope=envelope)
    except SkewgateError as err:  # MLflow unreachable or failing: the step's answer could not be recorded
        prior = f"{verdict.message}; " if verdict is not None and verdict.status == "error" else ""
        return StepResult(Verdict.error(step, f"{prior}{err}"))
    return StepResult(verdict, envelope)


def record_refusal(step: str, err: SkewgateError, tracking: TrackingOptions, *,
                   parameters: Mapping[str, Any]) -> StepResult:
    """The `error` verdict of a step whose parameters were refused before its options existed (a KFP string
    such as `class_axis='two'` that does not parse), recorded in its step run as any error is: a task that
    failed at start is in the run history, naming the parameter, and the raw `parameters` are its params."""

    def refuse(_: StepRun | None) -> Verdict:
        raise err

    return evaluate_and_record(step, refuse, tracking, settings=dict(parameters))


def _missing_local_input(inputs: Mapping[str, str | PurePath | None]) -> InputError | None:
    """The first input given as a plain local path (no URI, no glob) that does not exist, as an `InputError`."""
    from pathlib import Path

    for name, value in inputs.items():
        text = "" if value is None else str(value)
        if text and not any(c in text for c in ":*?[") and not Path(text).exists():
            return InputError(text, expected=f"the {name} input: an existing file or directory", found="no such path")
    return None


def _context(tracking: TrackingOptions, run: StepRun | None) -> RunContext:
    """Where a verdict is recorded, as its signature states it: the pipeline run, the step run, the time."""
    from skewgate.common.attest import RunContext

    return RunContext(pipeline_run_id=tracking.pipeline_run_id, step_run_id=run.run_id if run else "",
                      recorded_at_ms=time.time_ns() // 1_000_000)


def sign_verdict(verdict: Verdict, signing_key: str = "", *,
                 context: RunContext | None = None) -> dict[str, Any] | None:
    """The DSSE envelope of `verdict` signed with `signing_key` (empty: `$SKEWGATE_SIGNING_KEY`) and its run
    `context` (None: an ad-hoc verdict); None when no key is configured, or the verdict is an `error` or about no
    artifact."""
    from skewgate.common import attest

    key = attest.signing_key_from_env(signing_key or None)
    if key is None or verdict.subject is None or verdict.status == "error":
        return None
    return attest.sign(attest.verdict_statement(verdict, context), key)
