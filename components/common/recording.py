"""Evaluate a step and record its verdict in MLflow: the part the CLI and the KFP component share.

Whatever happens, a `Verdict` comes back: an exception during evaluation becomes status `error` (could not
evaluate), and so does a failure to record it (an unrecorded verdict must not count as evidence).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skewgate.common.errors import SkewgateError
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
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


@contextlib.contextmanager
def _step_run(step: str, tracking: TrackingOptions) -> Iterator[StepRun | None]:
    if not tracking.uri:
        yield None
        return
    from skewgate.common import mlflow_log

    connection = mlflow_log.connect(tracking.uri, experiment=tracking.experiment, deadline_s=tracking.deadline_s)
    with connection.step_run(step, pipeline_run_id=tracking.pipeline_run_id or None) as run:
        yield run


def evaluate_and_record(step: str, evaluate: Evaluate, tracking: TrackingOptions) -> Verdict:
    verdict: Verdict | None = None
    try:
        with _step_run(step, tracking) as run:
            try:
                verdict = evaluate(run)
            except SkewgateError as err:
                verdict = Verdict.error(step, str(err))
            except Exception as err:  # a bug or an unexpected library error: still "could not evaluate"
                log.debug("unexpected error in %s", step, exc_info=True)
                verdict = Verdict.error(step, f"{type(err).__name__}: {err}")
            if run is not None:
                run.log_verdict(verdict, envelope=sign_verdict(verdict, tracking.signing_key))
    except SkewgateError as err:  # MLflow unreachable or failing: the step's answer could not be recorded
        prior = f"{verdict.message}; " if verdict is not None and verdict.status == "error" else ""
        verdict = Verdict.error(step, f"{prior}{err}")
    return verdict


def sign_verdict(verdict: Verdict, signing_key: str = "") -> dict[str, Any] | None:
    """The DSSE envelope of `verdict` when a signing key is configured (and the verdict is about an artifact);
    deterministic, so every writer of the same verdict writes the same envelope."""
    from skewgate.common import attest

    key = attest.signing_key_from_env(signing_key or None)
    if key is None or verdict.subject is None or verdict.status == "error":
        return None
    return attest.sign(attest.verdict_statement(verdict), key)
