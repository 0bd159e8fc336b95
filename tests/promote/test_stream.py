"""A stateful model's release: the FULL model is promoted, the STEP model (served step by step) is registered
beside as `<name>-step` only when the probe judged exactly it and parity drove exactly it against FULL, with the
stream checks the release of a stateful model requires."""

import pytest

from skewgate.common import attest
from skewgate.common.io import sha256_file
from skewgate.common.policy import STREAM_CHECKS, GatePolicy
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.promote.core import Policy
from skewgate.promote.core import promote as promote_core
from tests.promote.fake_registry import FakeRegistry
from tests.promote.test_core import NAME, PASSING, PIPELINE_KEY, TRUSTED, _write

REQUIRED = ("export", "parity", "probe")
PARITY_STREAM = [Check(name, passed=True) for name in STREAM_CHECKS["parity"]]
PROBE_STREAM = [Check(name, passed=True) for name in ("stream.sequences_match", "stream.isolation", "stream.reset")]


@pytest.fixture
def files(tmp_path, tiny_onnx):
    import onnx

    full, step = tmp_path / "full.onnx", tmp_path / "step.onnx"
    full.write_bytes(tiny_onnx.read_bytes())
    model = onnx.load(str(tiny_onnx))
    model.producer_name = "step stand-in"  # another valid file with another digest
    onnx.save(model, str(step))
    return full, step


def _evidence(directory, full, step, *, probed=None, streamed=None, probe_checks=PROBE_STREAM):
    """export about FULL; parity about FULL naming the STEP it drove (`streamed`); the probe about `probed`."""
    sha, step_sha = sha256_file(full), sha256_file(step)
    parity = Verdict.from_checks("parity", [*PASSING, *PARITY_STREAM], subject=Subject(
        "full.onnx", sha, data={"stream_onnx": streamed or step_sha}))
    probe = Verdict.from_checks("probe", [*PASSING, *probe_checks], subject=Subject("step.onnx", probed or step_sha))
    export = Verdict.from_checks("export", PASSING, subject=Subject("full.onnx", sha))
    return _write(directory, export, parity, probe)


def _promote(verdicts, full, step, registry):
    policy = Policy(gates=GatePolicy(required=REQUIRED).requiring(STREAM_CHECKS), trusted_keys=TRUSTED)
    return promote_core(model_name=NAME, onnx=full, verdicts_dir=verdicts, registry=registry, policy=policy,
                        alias="champion", signing_key=PIPELINE_KEY, step=step)


def test_the_step_model_is_registered_beside_and_named_in_the_signed_decision(files, tmp_path):
    full, step = files
    registry = FakeRegistry()
    result = _promote(_evidence(tmp_path / "v", full, step), full, step, registry)
    assert result.status == "pass", result.message
    assert result.details["step_version"] == "1"
    assert registry.aliases[NAME]["champion"] == "1" and registry.aliases[f"{NAME}-step"]["champion"] == "1"
    tags = registry.versions[f"{NAME}-step"]["1"]
    assert tags["skewgate.onnx_sha256"] == sha256_file(step) and tags["skewgate.fp32.sha256"] == sha256_file(full)
    envelope = registry.attestations[(NAME, "1")][f"promotion{attest.ENVELOPE_SUFFIX}"]
    (tmp_path / "promotion.jsonl").write_bytes(envelope)
    statement, _ = attest.open_envelope(attest.read_envelope(tmp_path / "promotion.jsonl"), TRUSTED)
    assert statement["predicate"]["served"] == {"probe": sha256_file(step)}
    assert [s["digest"]["sha256"] for s in statement["subject"]] == [sha256_file(full), sha256_file(step)]


@pytest.mark.parametrize(
    ("planted", "refusal"),
    [
        pytest.param({"probed": "f" * 64}, "evidence.probe", id="probe-judged-another-file"),
        pytest.param({"streamed": "e" * 64}, "stream.same_artifact", id="parity-drove-another-step"),
        pytest.param({"probe_checks": []}, "no check 'stream.*'", id="probe-without-stream-checks"),
    ],
)
def test_a_step_model_the_gates_did_not_judge_blocks_the_promotion(files, tmp_path, planted, refusal):
    full, step = files
    registry = FakeRegistry()
    result = _promote(_evidence(tmp_path / "v", full, step, **planted), full, step, registry)
    assert result.status == "fail" and refusal in result.message
    assert f"{NAME}-step" not in registry.versions and registry.get_alias(NAME, "champion") is None


def test_without_the_step_model_a_probe_of_it_is_not_evidence_for_the_full_model(files, tmp_path):
    full, step = files
    policy = Policy(gates=GatePolicy(required=REQUIRED), trusted_keys=TRUSTED)
    result = promote_core(model_name=NAME, onnx=full, verdicts_dir=_evidence(tmp_path / "v", full, step),
                          registry=FakeRegistry(), policy=policy, alias="champion", signing_key=PIPELINE_KEY)
    assert result.status == "fail" and "but the file to promote is" in result.check("evidence.probe").detail
