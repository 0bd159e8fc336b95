"""Promote against careless and hostile evidence, and against crashes at every registry write.

Each case ends refused (or as bad input) with the alias where it was and the champion's evidence untouched."""

import base64
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from skewgate.common import attest
from skewgate.common.errors import BackendError, InputError
from skewgate.common.io import sha256_file
from skewgate.common.policy import GatePolicy
from skewgate.promote.core import Policy
from skewgate.promote.core import promote as promote_core
from tests.common.test_io import deadline
from tests.promote.fake_registry import MUTATIONS, CrashingRegistry, FakeRegistry
from tests.promote.test_core import (
    FAILING,
    NAME,
    OTHER_KEY,
    PASSING,
    PIPELINE_KEY,
    TRUSTED,
    _verdict,
    _write,
    promote,
)


@pytest.fixture
def champion(onnx_file):
    """A registry whose champion v1 is another file, with complete evidence."""
    registry = FakeRegistry()
    registry.versions[NAME] = {"1": {"skewgate.onnx_sha256": "0" * 64, "skewgate.export.status": "pass",
                                     "skewgate.promotion.champion.status": "promoted"}}
    registry.aliases[NAME] = {"champion": "1"}
    return registry


def _unchanged(registry, before):
    assert registry.aliases[NAME] == {"champion": "1"}
    assert registry.versions[NAME]["1"] == before


def test_a_hand_written_unsigned_verdict_is_refused(onnx_file, tmp_path, champion):
    before = dict(champion.versions[NAME]["1"])
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)), key=None)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion)
    assert result.status == "fail"
    assert "unsigned: no export.intoto.jsonl beside the verdict" in result.message
    _unchanged(champion, before)


def test_a_verdict_signed_by_an_untrusted_key_is_refused(onnx_file, tmp_path, champion):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)), key=OTHER_KEY)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion)
    assert result.status == "fail" and "no valid signature by a trusted key" in result.message
    assert champion.aliases[NAME]["champion"] == "1"


def test_a_signed_verdict_edited_afterwards_is_refused(onnx_file, tmp_path, champion):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    data = json.loads((verdicts / "export.json").read_text())
    data["checks"][0]["detail"] = "looked fine to me"  # a consistent edit: the status still follows
    (verdicts / "export.json").write_text(json.dumps(data))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion)
    assert result.status == "fail" and "the signed verdict differs from the verdict file" in result.message


def test_an_envelope_signed_for_another_artifact_is_refused(onnx_file, tmp_path, champion):
    other = _write(tmp_path / "other", _verdict("export", PASSING, "f" * 64))
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)), key=None)
    shutil.copy(other / "export.intoto.jsonl", verdicts / "export.intoto.jsonl")
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion)
    assert result.status == "fail" and "signed verdict differs" in result.message


def test_a_signed_verdict_about_another_artifact_is_refused(onnx_file, tmp_path, champion):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, "f" * 64))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion)
    assert result.status == "fail"
    assert "the file to promote is" in result.message and "signed for artifact sha256 fff" in result.message


def _signed(verdict, context, key=PIPELINE_KEY):
    return attest.sign(attest.verdict_statement(verdict, context), key)


RUN_A = attest.RunContext("run-a", "step-run-1", 1_000)
RUN_B = attest.RunContext("run-b", "step-run-2", 2_000)


def test_a_verdict_signed_for_another_pipeline_run_is_refused_naming_the_step_and_both_runs(onnx_file, tmp_path,
                                                                                           champion):
    before = dict(champion.versions[NAME]["1"])
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)), context=RUN_A)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "fail"
    assert re.search(r"evidence\.export: signature: signed for pipeline run run-a, not this pipeline run run-b",
                     result.message)
    _unchanged(champion, before)
    assert promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                   pipeline_run_id="run-a").status == "pass"  # in its own pipeline run it counts


def test_an_ad_hoc_verdict_is_refused_inside_a_pipeline_run_and_judged_by_signature_alone_outside(
        onnx_file, tmp_path, champion):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))  # no run context
    statement = json.loads(base64.b64decode(json.loads((verdicts / "export.intoto.jsonl").read_text())["payload"]))
    assert "annotations" not in statement["subject"][0]  # the statement as signed before run binding
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "fail" and "signed for no pipeline run (an ad-hoc verdict)" in result.message
    assert promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion).status == "pass"


def test_unsigned_tags_and_envelopes_in_other_runs_change_nothing(onnx_file, tmp_path, champion):
    """This run's export failed. An old pass (signed for run A), its digest copied into a tag of a hand-made step
    run of run B, its envelope copied there too, and a pass signed by an untrusted key: all ignored."""
    before = dict(champion.versions[NAME]["1"])
    sha = sha256_file(onnx_file)
    old_pass = _verdict("export", PASSING, sha)
    failed = _verdict("export", FAILING, sha)
    forged = _verdict("export", PASSING, sha)
    champion.logged = {"run-b": {"export": old_pass.digest()}}
    champion.envelopes = {"run-b": [_signed(failed, RUN_B), _signed(old_pass, RUN_A),
                                    _signed(forged, attest.RunContext("run-b", "hand-made", 9_000), OTHER_KEY),
                                    {"payloadType": attest.PAYLOAD_TYPE, "payload": "e30=", "signatures": []}]}
    replayed = _write(tmp_path / "a", old_pass, context=RUN_A)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=replayed, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "fail" and "signed for pipeline run run-a" in result.message
    this_run = _write(tmp_path / "b", failed, context=RUN_B)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=this_run, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "fail" and "status fail" in result.message and "superseded" not in result.message
    _unchanged(champion, before)


def test_a_retry_inside_one_pipeline_run_counts_its_latest_signed_verdict(onnx_file, tmp_path, champion):
    sha = sha256_file(onnx_file)
    first, retry = _verdict("export", FAILING, sha), _verdict("export", PASSING, sha)
    later = attest.RunContext("run-b", "step-run-3", 3_000)
    champion.envelopes = {"run-b": [_signed(first, RUN_B), _signed(retry, later)]}
    verdicts = _write(tmp_path / "v", retry, context=later)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "pass" and champion.aliases[NAME]["champion"] == "2"


def test_a_fail_signed_in_the_same_millisecond_as_the_presented_pass_is_not_resolved_in_its_favour(
        onnx_file, tmp_path, champion):
    """Two different verdicts of one step signed for one run at the same instant: neither is later, and the tie
    is not the presented one's win."""
    before = dict(champion.versions[NAME]["1"])
    sha = sha256_file(onnx_file)
    passed, failed = _verdict("export", PASSING, sha), _verdict("export", FAILING, sha)
    same_instant = attest.RunContext("run-b", "step-run-3", RUN_B.recorded_at_ms)
    champion.envelopes = {"run-b": [_signed(passed, RUN_B), _signed(failed, same_instant)]}
    verdicts = _write(tmp_path / "v", passed, context=RUN_B)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "fail" and "superseded" in result.message, result.message
    _unchanged(champion, before)
    earlier = attest.RunContext("run-b", "step-run-3", RUN_B.recorded_at_ms - 1)
    champion.envelopes = {"run-b": [_signed(passed, RUN_B), _signed(failed, earlier)]}
    assert promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                   pipeline_run_id="run-b").status == "pass"  # a millisecond earlier: the presented one is the latest


def test_an_earlier_pass_superseded_by_a_later_signed_fail_is_refused(onnx_file, tmp_path, champion):
    before = dict(champion.versions[NAME]["1"])
    sha = sha256_file(onnx_file)
    first, retry = _verdict("export", PASSING, sha), _verdict("export", FAILING, sha)
    later = attest.RunContext("run-b", "step-run-3", 3_000)
    champion.envelopes = {"run-b": [_signed(first, RUN_B), _signed(retry, later)]}
    verdicts = _write(tmp_path / "v", first, context=RUN_B)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion,
                     pipeline_run_id="run-b")
    assert result.status == "fail"
    assert ("superseded: pipeline run run-b holds a later signed export verdict (fail, step run step-run-3) than "
            "this one (step run step-run-2)") in result.message
    _unchanged(champion, before)


def test_without_trusted_keys_unsigned_evidence_needs_an_explicit_opt_in(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)), key=None)
    refused = promote_core(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=FakeRegistry(),
                           alias="champion", policy=Policy(gates=GatePolicy(required=("export",))))
    assert refused.status == "fail" and "--allow-unsigned" in refused.message
    allowed = promote_core(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=FakeRegistry(),
                           alias="champion", policy=Policy(gates=GatePolicy(required=("export",)),
                                                               allow_unsigned=True))
    assert allowed.status == "pass"


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda d: d.update(status="pass"), id="failing-verdict-status-edited"),
        pytest.param(lambda d: d.update(checks=[], status="pass"), id="empty-checks"),
        pytest.param(lambda d: d["checks"][0].update(passed="false"), id="passed-as-string"),
    ],
)
def test_hand_edited_verdicts_are_bad_input_before_the_registry_is_touched(onnx_file, tmp_path, champion, edit):
    before = dict(champion.versions[NAME]["1"])
    verdicts = _write(tmp_path / "v", _verdict("export", [PASSING[0].__class__("c", passed=False)],
                                               sha256_file(onnx_file)))
    data = json.loads((verdicts / "export.json").read_text())
    edit(data)
    (verdicts / "export.json").write_text(json.dumps(data))
    with pytest.raises(InputError):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=champion)
    _unchanged(champion, before)
    assert champion.log == []


class Untouchable:
    """A registry that no call may reach: bad input must be refused before the first one."""

    def __getattr__(self, name):
        raise AssertionError(f"the registry was touched ({name}) before the evidence was read")


def _fifo(path):
    os.mkfifo(path)


def _dev_zero(path):
    path.symlink_to("/dev/zero")


def _directory(path):
    path.mkdir()


LIMIT = 1 << 16  # what the test lowers both limits to: above a real verdict and envelope


def _oversized(path):
    path.write_bytes(b" " * (LIMIT + 1))


@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"), reason="needs a POSIX /dev")
@pytest.mark.parametrize("make", [_fifo, _dev_zero, _directory, _oversized])
@pytest.mark.parametrize("entry", ["zz.json", "export.intoto.jsonl"])
def test_an_entry_that_is_not_a_small_regular_file_is_bad_input_before_the_registry_is_touched(
        onnx_file, tmp_path, monkeypatch, make, entry):
    from skewgate.common import verdict as verdict_module

    monkeypatch.setattr(verdict_module, "MAX_VERDICT_BYTES", LIMIT)
    monkeypatch.setattr(attest, "MAX_ENVELOPE_BYTES", LIMIT)
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    (verdicts / entry).unlink(missing_ok=True)
    make(verdicts / entry)
    with deadline(), pytest.raises(InputError) as caught:  # a FIFO once blocked here for ever, /dev/zero filled memory
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=Untouchable())
    assert caught.value.source == str(verdicts / entry)
    assert "regular file" in str(caught.value) or f"at most {LIMIT} bytes" in str(caught.value)


def test_evidence_linked_from_elsewhere_counts_and_is_read_once(onnx_file, tmp_path):
    """A link to a regular file is that file (mounted Secrets, hand-assembled folders); what promote stores and
    digests is what it read, even if the file changes afterwards."""
    written = _write(tmp_path / "steps", _verdict("export", PASSING, sha256_file(onnx_file)))
    verdicts = tmp_path / "v"
    verdicts.mkdir()
    for name in ("export.json", "export.intoto.jsonl"):
        (verdicts / name).symlink_to(written / name)
    original = (written / "export.json").read_bytes()

    class SwappingRegistry(FakeRegistry):
        def find_version(self, name, sha256):
            (written / "export.json").write_bytes(b"swapped after reading")
            return super().find_version(name, sha256)

    registry = SwappingRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "pass" and registry.aliases[NAME] == {"champion": "1"}
    assert registry.attestations[(NAME, "1")]["export.json"] == original
    assert f"`{hashlib.sha256(original).hexdigest()[:12]}`" in registry.descriptions[(NAME, "1")]


def test_a_verdict_cannot_write_outside_its_own_prefix(onnx_file, tmp_path):
    from skewgate.common.verdict import Verdict

    sha = sha256_file(onnx_file)
    failing = _verdict("export", [PASSING[0].__class__("c", passed=False)], sha)
    hostile_tags = {"skewgate.promotion.champion.status": "promoted", "skewgate.onnx_sha256": "0" * 64,
                    "skewgate.drift.status": "pass"}
    with pytest.raises(ValueError, match="registry_tags"):
        Verdict.from_checks("export", failing.checks, subject=failing.subject, registry_tags=hostile_tags)
    # The same tags in a hand-edited schema-1 file (which kept them in `details`) are refused on reading.
    v1 = failing.to_dict() | {"schema_version": 1}
    v1["details"] = {"registry_tags": hostile_tags}
    folder = tmp_path / "hostile"
    folder.mkdir()
    (folder / "export.json").write_text(json.dumps(v1))
    registry = FakeRegistry()
    with pytest.raises(InputError, match="registry_tags"):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=folder, registry=registry)
    assert registry.versions == {}
    # Under its own prefix, only what a later step reads back from the version is tagged (the drift profile);
    # the status is promote's to derive, and it goes into the description's table.
    own = Verdict.from_checks("export", failing.checks, subject=failing.subject, registry_tags={
        "skewgate.export.status": "pass", "skewgate.export.profile_uri": "s3://ok"})
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=_write(tmp_path / "v", own), registry=registry)
    tags = registry.versions[NAME]["1"]
    assert result.status == "fail"
    assert tags["skewgate.promotion.champion.status"] == "refused" and tags["skewgate.onnx_sha256"] == sha
    assert not {"skewgate.export.status", "skewgate.export.profile_uri", "skewgate.drift.status"} & set(tags)
    assert "| export | fail |" in registry.descriptions[(NAME, "1")]


@pytest.mark.parametrize(
    ("required", "key", "tagged"),
    [
        pytest.param(("export", "estimate"), "pipeline", True, id="required-and-signed"),
        pytest.param(("export",), "pipeline", False, id="not-required"),
        pytest.param(("export", "estimate"), None, False, id="required-but-unsigned"),
    ],
)
def test_only_judged_evidence_tags_the_profile_the_nightly_trusts(onnx_file, tmp_path, required, key, tagged):
    """The estimate profile's tags are what the nightly estimates from: a verdict no check judged (not required,
    or refused) must not put them on the version, even where the promotion goes through."""
    from skewgate.common import mlflow_conventions as conv
    from skewgate.common.verdict import Verdict

    sha = sha256_file(onnx_file)
    profile = {conv.ESTIMATE_PROFILE_URI_TAG: "runs:/r/profile/estimate.profile",
               conv.ESTIMATE_PROFILE_SHA_TAG: "a" * 64}
    estimate = Verdict.from_checks("estimate", PASSING, subject=_verdict("export", PASSING, sha).subject,
                                   registry_tags=profile)
    folder = _write(tmp_path / "v", _verdict("export", PASSING, sha))
    _write(folder, estimate, key=PIPELINE_KEY if key else None)
    registry = FakeRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=folder, registry=registry, required=required)
    assert result.status == ("fail" if key is None else "pass")
    tags = registry.versions[NAME]["1"]
    assert (set(profile) <= set(tags)) == tagged and (not tagged) == (not set(profile) & set(tags))


def test_refusing_the_champions_own_file_leaves_the_champion_as_it_was(onnx_file, tmp_path):
    sha = sha256_file(onnx_file)
    registry = FakeRegistry()
    first = promote(model_name=NAME, onnx=onnx_file, registry=registry,
                    verdicts_dir=_write(tmp_path / "v1", _verdict("export", PASSING, sha)))
    assert first.status == "pass"
    before = dict(registry.versions[NAME]["1"])
    failing = _verdict("export", [PASSING[0].__class__("c", passed=False)], sha)
    again = promote(model_name=NAME, onnx=onnx_file, registry=registry, verdicts_dir=_write(tmp_path / "v2", failing))
    assert again.status == "fail"
    _unchanged(registry, before)
    assert [r["promoted"] for r in registry.log] == [True, False]


def test_promote_signs_its_decision_and_stores_the_evidence_with_the_version(onnx_file, tmp_path):
    registry = FakeRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    stored = registry.attestations[(NAME, "1")]
    assert set(stored) == {"export.json", "export.intoto.jsonl", "promotion.intoto.jsonl"}
    statement, signer = attest.open_envelope(json.loads(stored["promotion.intoto.jsonl"]), TRUSTED)
    assert signer == PIPELINE_KEY.keyid and statement["predicateType"] == attest.PROMOTION_PREDICATE
    assert statement["subject"][0]["digest"]["sha256"] == sha256_file(onnx_file)
    assert statement["predicate"]["decision"] == "pass" and statement["predicate"]["version"] == "1"
    assert registry.versions[NAME]["1"]["skewgate.attestation.champion.uri"].startswith("memory://")


def _complete(registry, version):
    tags = registry.versions[NAME][version]
    return "skewgate.onnx_sha256" in tags and "skewgate.attestation.champion.uri" in tags and \
        "export.json" in registry.attestations.get((NAME, version), {})


CRASH_POINTS = [pytest.param(at, when, id=f"{when}-write-{at}") for at in range(1, len(MUTATIONS) + 2)
                for when in ("before", "after")]


@pytest.mark.parametrize(("crash_at", "when"), CRASH_POINTS)
def test_a_crash_at_any_write_leaves_the_alias_unmoved_or_on_complete_evidence(onnx_file, tmp_path, crash_at, when):
    registry = CrashingRegistry(crash_at, when)
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    try:
        result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    except BackendError:
        result = None  # exit 2: the promotion did not happen
    alias = registry.get_alias(NAME, "champion")
    if result is None or result.status == "error":  # exit 2 (an alias that did not move is logged as such)
        assert alias is None, "an error exit must mean the alias did not move"
    else:
        assert result.status == "pass" and alias == "1" and _complete(registry, "1")
    if alias is not None:
        assert _complete(registry, alias)


class _LogDown(FakeRegistry):
    """A registry whose promotion log cannot be written."""

    def append_promotion_log(self, name, record):
        raise BackendError("promotion log down")


def test_a_promotion_log_that_cannot_be_written_fails_a_refusal_but_not_a_promotion(onnx_file, tmp_path):
    """A refusal's only lasting trace is its record: without it, exit 2. A promotion already moved the alias:
    it passes, saying the record is missing."""
    sha = sha256_file(onnx_file)
    refused = _write(tmp_path / "refused", _verdict("export", FAILING, sha))
    with pytest.raises(BackendError, match="promotion log down"):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=refused, registry=_LogDown())
    registry = _LogDown()
    passed = _write(tmp_path / "passed", _verdict("export", PASSING, sha))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=passed, registry=registry)
    assert result.status == "pass" and result.details["log_written"] is False
    assert registry.get_alias(NAME, "champion") == "1"


def test_the_version_description_summarises_the_gate_for_a_person(onnx_file, tmp_path):
    registry = FakeRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    text = registry.descriptions[(NAME, "1")]
    assert text.startswith("skewgate: promoted. 1 of 1 required steps passed for sha256 ")
    assert "| export | pass | all 1 checks passed |" in text


def _int8_evidence(tmp_path, onnx_file, int8_file, *, written=None, judged=None):
    """export, calibrate and parity verdicts about `onnx_file`, naming the INT8 file they wrote and judged."""
    from skewgate.common.verdict import Subject, Verdict

    sha = sha256_file(onnx_file)
    int8_sha = sha256_file(int8_file)
    calibrate = Verdict.from_checks("calibrate", PASSING, subject=Subject("m.onnx", sha), registry_tags={
        "skewgate.calibrate.int8_sha256": written or int8_sha})
    parity = Verdict.from_checks("parity", PASSING, subject=Subject("m.onnx", sha,
                                                                     data={"int8": judged or int8_sha}))
    return _write(tmp_path / "v", _verdict("export", PASSING, sha), calibrate, parity)


@pytest.fixture
def int8_file(tmp_path, onnx_file):
    import onnx

    model = onnx.load(str(onnx_file))
    model.producer_name = "int8 stand-in"  # another valid file with another digest
    path = tmp_path / "model.int8.onnx"
    onnx.save(model, str(path))
    return path


def test_the_int8_model_is_registered_beside_with_its_own_digest_and_alias(onnx_file, int8_file, tmp_path):
    registry = FakeRegistry()
    verdicts = _int8_evidence(tmp_path, onnx_file, int8_file)
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry, int8=int8_file,
                     required=("export", "calibrate", "parity"))
    assert result.status == "pass" and result.details["int8_version"] == "1"
    tags = registry.versions[f"{NAME}-int8"]["1"]
    assert tags["skewgate.onnx_sha256"] == sha256_file(int8_file)
    assert tags["skewgate.fp32.version"] == "1" and tags["skewgate.fp32.sha256"] == sha256_file(onnx_file)
    assert registry.aliases[f"{NAME}-int8"]["champion"] == "1" and registry.aliases[NAME]["champion"] == "1"


@pytest.mark.parametrize("which", ["written", "judged"])
def test_an_int8_file_that_calibrate_or_parity_did_not_judge_blocks_the_promotion(onnx_file, int8_file, tmp_path,
                                                                                  which):
    registry = FakeRegistry()
    verdicts = _int8_evidence(tmp_path, onnx_file, int8_file, **{which: "d" * 64})
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry, int8=int8_file,
                     required=("export", "calibrate", "parity"))
    assert result.status == "fail" and "int8.same_artifact" in result.message
    assert f"{NAME}-int8" not in registry.versions and registry.get_alias(NAME, "champion") is None
