"""Another step's details read back typed: what promote and nightly drift wrote, through a verdict's JSON."""

import json

from skewgate.common.step_details import NightRecord, PromoteDetails
from skewgate.common.verdict import Check, Subject, Verdict


def _through_json(verdict):
    return Verdict.from_dict(json.loads(verdict.to_json()))


def test_promote_details_read_back_from_the_verdict_file_are_what_promote_wrote():
    written = PromoteDetails(model_name="digits", version="4", alias="champion", promoted=False,
                             previous_alias_version="3", reason="evidence.parity: status fail",
                             outcome_tags_written=True, int8_version=None, policy={"required": ["export"]},
                             outcome="refused", alias_version="3")
    verdict = Verdict.from_checks("promote", [Check("evidence.parity", passed=False)],
                                  subject=Subject(artifact="m.onnx", sha256="ab" * 32), details=written)
    assert PromoteDetails.of(_through_json(verdict)) == written


def test_a_night_read_back_is_the_version_and_date_it_judged_whatever_else_its_details_hold():
    verdict = Verdict.from_checks("nightly-drift", [Check("ks_drift", passed=True)], subject=None, details={
        "model_version": "7", "run_date": "2026-12-01T02:00:00+00:00", "shards": 2, "mmd": {"value": 0.0}})
    assert NightRecord.of(_through_json(verdict)) == NightRecord(model_version="7",
                                                                 run_date="2026-12-01T02:00:00+00:00")


def test_details_that_do_not_say_read_as_none():
    assert PromoteDetails.of(Verdict.error("promote", "registry down")) is None
    assert NightRecord.of(Verdict.error("nightly-drift", "no profile")) is None
    # a field without a default missing: not promote's details, whatever else they hold
    partial = Verdict.from_checks("promote", [Check("c", passed=True)], subject=None,
                                  details={"version": "3", "reason": "r"})
    assert PromoteDetails.of(partial) is None
