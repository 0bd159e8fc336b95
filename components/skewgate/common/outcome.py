"""What a finished pipeline run amounts to, from its steps' verdicts: the outcome its MLflow parent run ends with.

Pure (verdicts in, `Outcome` out), so the rules are tested without MLflow or KFP; `mlflow_log.finish_run`
writes the result. Empty means fail here too: a release gate whose promote verdict is missing did not promote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from skewgate.common import mlflow_conventions as conv
from skewgate.common.step_details import NightRecord, PromoteDetails
from skewgate.common.verdict import Verdict

# release gate: promoted | blocked | error; nightly drift: pass | drift | error; one CLI step: its status
Label = Literal["promoted", "blocked", "pass", "drift", "degraded", "warn", "fail", "error"]


@dataclass(frozen=True)
class Outcome:
    label: Label
    succeeded: bool  # the parent run ends FINISHED when True, FAILED otherwise
    reason: str
    digest: str = ""  # SHA-256 of the candidate (release gate) or of the judged model (nightly, CLI)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    candidate: str = ""  # the file (or URI) that was judged, as a step named it: the parent run is named after it


def candidate_of(verdicts: Mapping[str, Verdict], *, prefer: tuple[str, ...] = ()) -> str:
    """What the run judged, as the user gave it: the first of the `prefer`red steps' (then any step's) subject
    source (export's `.pt2`) or artifact; empty when no verdict names one."""
    ordered = [verdicts[s] for s in prefer if s in verdicts] + [v for s, v in verdicts.items() if s not in prefer]
    for verdict in ordered:
        if verdict.subject is not None and (verdict.subject.source or verdict.subject.artifact):
            return verdict.subject.source or verdict.subject.artifact
    return ""


def release_outcome(verdicts: Mapping[str, Verdict], *, final_state: str = "", final_error: str = "") -> Outcome:
    """promoted (FINISHED) only on promote's `pass`; blocked when promote refused; error when a step could not
    evaluate or promote never ran. `final_state`/`final_error` are KFP's view of the run (PipelineTaskFinalStatus)."""
    promote = verdicts.get("promote")
    export = verdicts.get("export")
    digest = (promote.subject.sha256 if promote is not None and promote.subject is not None
              else export.subject.sha256 if export is not None and export.subject is not None else "")
    metrics = _step_metrics(verdicts) | {"gate.promoted": float(promote is not None and promote.status == "pass")}
    decided = None if promote is None else PromoteDetails.of(promote)
    tags = {} if decided is None else {conv.MODEL_VERSION_TAG: decided.version}
    candidate = candidate_of(verdicts, prefer=("export", "promote"))
    if promote is not None and promote.status in ("pass", "fail"):
        reason = promote.message if decided is None else decided.reason
        return Outcome("promoted" if promote.status == "pass" else "blocked", promote.status == "pass", reason,
                       digest, metrics, tags, candidate)
    return Outcome("error", False, _error_reason(verdicts, "promote", final_state, final_error), digest, metrics,
                   tags, candidate)


def nightly_outcome(verdicts: Mapping[str, Verdict], *, final_state: str = "", final_error: str = "") -> Outcome:
    """pass (FINISHED) on a drift `pass`/`warn`, drift (FAILED) on `fail`, error otherwise; a night that also
    estimated accuracy (`nightly-estimate`) is degraded (FAILED) when the estimate fails and drift did not, and an
    error when the estimate could not be made."""
    verdict = verdicts.get("nightly-drift")
    estimated = verdicts.get("nightly-estimate")
    metrics = _step_metrics(verdicts)
    candidate = candidate_of(verdicts, prefer=("nightly-drift",))
    if verdict is None or verdict.status == "error" or (estimated is not None and estimated.status == "error"):
        return Outcome("error", False, _error_reason(verdicts, "nightly-drift", final_state, final_error),
                       metrics=metrics, candidate=candidate)
    digest = verdict.subject.sha256 if verdict.subject is not None else ""
    night = NightRecord.of(verdict)
    tags = {} if night is None else {conv.MODEL_VERSION_TAG: night.model_version}
    label: Label = "drift" if verdict.status == "fail" else "pass"
    reason = verdict.message
    if estimated is not None:
        label = "degraded" if label == "pass" and estimated.status == "fail" else label
        reason += f"; estimate: {estimated.message}"
    return Outcome(label, label == "pass", reason, digest, metrics, tags, candidate)


def step_outcome(verdict: Verdict | None, *, error: str = "") -> Outcome:
    """An ad-hoc CLI call: its one step's status; FINISHED for pass/warn."""
    if verdict is None:
        return Outcome("error", False, error or "the step recorded no verdict")
    digest = verdict.subject.sha256 if verdict.subject is not None else ""
    return Outcome(verdict.status, verdict.status in {"pass", "warn"}, verdict.message, digest,
                   _step_metrics({verdict.step: verdict}), candidate=candidate_of({verdict.step: verdict}))


def pipeline_outcome(pipeline: str, verdicts: Mapping[str, Verdict], *, final_state: str = "",
                     final_error: str = "") -> Outcome:
    judges = {"release-gate": release_outcome, "nightly-drift": nightly_outcome}
    if pipeline not in judges:
        raise ValueError(f"pipeline must be one of {sorted(judges)}, got {pipeline!r}")
    return judges[pipeline](verdicts, final_state=final_state, final_error=final_error)


def _step_metrics(verdicts: Mapping[str, Verdict]) -> dict[str, float]:
    """`<step>.passed` (1 pass/warn, 0 otherwise) per step, and counts per status."""
    metrics = {f"{step}.passed": float(v.status in {"pass", "warn"}) for step, v in verdicts.items()}
    for status in ("pass", "warn", "fail", "error"):
        metrics[f"steps.{status}"] = float(sum(v.status == status for v in verdicts.values()))
    return metrics


def _error_reason(verdicts: Mapping[str, Verdict], deciding: str, final_state: str, final_error: str) -> str:
    errored = [f"{step}: {v.message}" for step, v in verdicts.items() if v.status == "error"]
    if errored:
        return "could not evaluate: " + "; ".join(errored)
    state = f" (KFP: {final_state}{': ' + final_error if final_error else ''})" if final_state else ""
    return f"no {deciding} verdict was recorded{state}"
