"""The outcome a pipeline's parent run ends with, from its verdicts (pure: no MLflow)."""

import pytest

from skewgate.common import mlflow_conventions as conv
from skewgate.common.outcome import pipeline_outcome, release_outcome, step_outcome
from skewgate.common.step_details import PromoteDetails
from skewgate.common.verdict import Check, Subject, Verdict


def _verdict(step, status, sha="abc"):
    if status == "error":
        return Verdict.error(step, f"{step} broke", subject=Subject(artifact="m", sha256=sha))
    check = Check("c", passed=status == "pass", severity="warn" if status == "warn" else "fail")
    return Verdict.from_checks(step, [check], subject=Subject(artifact="m", sha256=sha))


@pytest.mark.parametrize(("statuses", "label", "succeeded"), [
    ({"export": "pass", "promote": "pass"}, "promoted", True),
    ({"export": "fail", "promote": "fail"}, "blocked", False),
    ({"export": "error"}, "error", False),
    ({"export": "pass", "promote": "error"}, "error", False),
    ({}, "error", False),
], ids=["promoted", "blocked", "step-errored", "promote-errored", "nothing-recorded"])
def test_release_outcome(statuses, label, succeeded):
    outcome = release_outcome({s: _verdict(s, st) for s, st in statuses.items()}, final_state="FAILED")
    assert (outcome.label, outcome.succeeded) == (label, succeeded)
    assert outcome.metrics["gate.promoted"] == float(label == "promoted")
    assert outcome.metrics["steps.error"] == sum(st == "error" for st in statuses.values())


@pytest.mark.parametrize(("status", "label"), [("pass", "promoted"), ("fail", "blocked")])
def test_the_release_outcome_names_the_version_promote_decided_about_and_why(status, label):
    details = PromoteDetails(model_name="m", version="3", alias="champion", promoted=status == "pass",
                             previous_alias_version="2", reason=f"why it was {label}", outcome_tags_written=True,
                             int8_version=None)
    promote = Verdict.from_checks("promote", [Check("evidence.export", passed=status == "pass")],
                                  subject=Subject(artifact="m", sha256="abc"), details=details)
    outcome = release_outcome({"export": _verdict("export", "pass"), "promote": promote})
    assert (outcome.label, outcome.reason, outcome.tags) == (label, f"why it was {label}",
                                                             {conv.MODEL_VERSION_TAG: "3"})


def test_a_promote_that_could_not_decide_names_no_version():
    outcome = release_outcome({"promote": _verdict("promote", "error")})
    assert outcome.label == "error" and outcome.tags == {}


def test_error_reason_names_the_step_that_could_not_evaluate():
    outcome = release_outcome({"export": _verdict("export", "pass"), "parity": _verdict("parity", "error")})
    assert outcome.reason == "could not evaluate: parity: parity broke"
    assert outcome.digest == "abc"  # the candidate's digest from export when promote never ran


@pytest.mark.parametrize(("status", "label", "succeeded"), [
    ("pass", "pass", True), ("warn", "pass", True), ("fail", "drift", False), ("error", "error", False),
], ids=["no-drift", "warn-is-no-block", "drift", "error"])
def test_nightly_outcome(status, label, succeeded):
    outcome = pipeline_outcome("nightly-drift", {"nightly-drift": _verdict("nightly-drift", status)})
    assert (outcome.label, outcome.succeeded) == (label, succeeded)


@pytest.mark.parametrize(("drift", "estimate", "label", "succeeded"), [
    ("pass", "pass", "pass", True), ("pass", "warn", "pass", True), ("pass", "fail", "degraded", False),
    ("fail", "fail", "drift", False), ("pass", "error", "error", False),
], ids=["both-hold", "estimate-undecided", "accuracy-dropped", "drift-leads", "estimate-could-not"])
def test_a_night_that_estimated_accuracy_fails_when_the_estimate_does(drift, estimate, label, succeeded):
    outcome = pipeline_outcome("nightly-drift", {"nightly-drift": _verdict("nightly-drift", drift),
                                                 "nightly-estimate": _verdict("nightly-estimate", estimate)})
    assert (outcome.label, outcome.succeeded) == (label, succeeded)
    if estimate != "error":
        assert "; estimate: " in outcome.reason


def test_unknown_pipeline_is_refused():
    with pytest.raises(ValueError, match="release-gate"):
        pipeline_outcome("release_gate", {})


def test_step_outcome_without_a_verdict_is_an_error():
    assert step_outcome(None, error="boom").label == "error"
    assert step_outcome(_verdict("drift", "warn")).succeeded
