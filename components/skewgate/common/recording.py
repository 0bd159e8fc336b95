"""Evaluate a step and record its verdict in MLflow: what every step's `run` (run.py, which its CLI and its KFP
component call) does around its evaluation.

Whatever happens, a `Verdict` comes back: an exception during evaluation becomes status `error` (could not
evaluate), and so does a failure to record it (an unrecorded verdict must not count as evidence).

A verdict is signed with where it was recorded (`attest.RunContext`: the pipeline run id, the step's MLflow run id,
the time). `evaluate_and_record` remembers that context for the verdict it returns, so that the envelope the CLI
writes beside `--report` and the one the KFP component outputs (`sign_verdict(verdict)`, later in the same
process) are byte for byte the one logged in the step run.

Every step run also shows how the step was set up and what it read: its settings as params (logged before it
evaluates, so a step that errors shows them too) and its inputs as datasets (from the verdict's subject, located
by path where the step's inputs are known). Each step's `run.py` passes both: `settings`, its options dataclass,
and `inputs`, its input paths by the names its verdict's subject gives their digests.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from skewgate.common.errors import SkewgateError
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.attest import RunContext
    from skewgate.common.mlflow_log import StepRun

log = logging.getLogger(__name__)
Evaluate = Callable[["StepRun | None"], Verdict]
# verdict digest → the run context it was recorded in (bounded: a process records a handful of verdicts)
_CONTEXTS: OrderedDict[str, RunContext] = OrderedDict()
_MAX_CONTEXTS = 256


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


def evaluate_and_record(step: str, evaluate: Evaluate, tracking: TrackingOptions, *, settings: Any = None,
                        inputs: Mapping[str, str | PurePath | None] | None = None) -> Verdict:
    """`evaluate` inside the step's MLflow run (when `tracking` has a URI), its verdict recorded there. `settings`
    (the step's options dataclass, or a mapping; None: no params) become the run's params and `inputs` (name →
    path, by the names the verdict's subject gives their digests; an input not given is None) locate its
    datasets."""
    verdict: Verdict | None = None
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
            context = _remember(verdict, tracking, run)
            if run is not None:
                run.log_verdict(verdict, envelope=sign_verdict(verdict, tracking.signing_key, context=context))
    except SkewgateError as err:  # MLflow unreachable or failing: the step's answer could not be recorded
        prior = f"{verdict.message}; " if verdict is not None and verdict.status == "error" else ""
        verdict = Verdict.error(step, f"{prior}{err}")
    return verdict


def _remember(verdict: Verdict, tracking: TrackingOptions, run: StepRun | None) -> RunContext:
    """The run context `verdict` is recorded (and signed) in, remembered for `sign_verdict`."""
    from skewgate.common.attest import RunContext

    context = RunContext(pipeline_run_id=tracking.pipeline_run_id, step_run_id=run.run_id if run else "",
                         recorded_at_ms=time.time_ns() // 1_000_000)
    digest = verdict.digest()
    _CONTEXTS[digest] = context
    _CONTEXTS.move_to_end(digest)
    while len(_CONTEXTS) > _MAX_CONTEXTS:
        _CONTEXTS.popitem(last=False)
    return context


def sign_verdict(verdict: Verdict, signing_key: str = "", *,
                 context: RunContext | None = None) -> dict[str, Any] | None:
    """The DSSE envelope of `verdict` when a signing key is configured (and the verdict is about an artifact),
    signed with its run context: `context`, else the one `evaluate_and_record` recorded it in, else none (an
    ad-hoc verdict). Deterministic, so every writer of the same recorded verdict writes the same envelope."""
    from skewgate.common import attest

    key = attest.signing_key_from_env(signing_key or None)
    if key is None or verdict.subject is None or verdict.status == "error":
        return None
    return attest.sign(attest.verdict_statement(verdict, context or _CONTEXTS.get(verdict.digest())), key)
