"""Replay protection against a real embedded MLflow: it rests on signatures, never on what MLflow holds.

Steps are recorded as a pipeline's are (`evaluate_and_record` under a pipeline run id, the report written as the
CLI writes it); an attacker has MLflow write access and no key."""

import base64
import json

import pytest
from mlflow import MlflowClient

from skewgate.common import attest
from skewgate.common import mlflow_conventions as conv
from skewgate.common.cli_support import write_report
from skewgate.common.io import sha256_file
from skewgate.common.recording import TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.export.run import ExportOptions
from skewgate.promote.run import PromoteOptions, run

EXPERIMENT = "digits"


@pytest.fixture
def gate(mlflow_db, tmp_path, tiny_onnx):
    key, public = attest.generate_keys(tmp_path / "keys")
    onnx_path = tmp_path / "model.onnx"
    onnx_path.write_bytes(tiny_onnx.read_bytes())
    uri = mlflow_db

    def tracking(pipeline_run_id):
        return TrackingOptions(uri=uri, experiment=EXPERIMENT, pipeline_run_id=pipeline_run_id, signing_key=str(key))

    def step(pipeline_run_id, *, passed, folder):
        """The export step inside `pipeline_run_id`: recorded in MLflow, its report and envelope in `folder`."""
        def evaluate(_run):
            return Verdict.from_checks("export", [Check("c", passed=passed, detail="" if passed else "broken")],
                                       subject=Subject("model.onnx", sha256_file(onnx_path))
                                       ).judged_with(ExportOptions())

        result = evaluate_and_record("export", evaluate, tracking(pipeline_run_id))
        folder = tmp_path / folder
        folder.mkdir()
        write_report(result, folder / "export.json")
        return folder

    def promote(folder, pipeline_run_id):
        return run(model_name="digits", onnx=onnx_path, verdicts_dir=folder, tracking=tracking(pipeline_run_id),
                   options=PromoteOptions(required=("export",), trusted_keys=(str(public),))).verdict

    return uri, step, promote


def _alias(uri):
    return MlflowClient(uri).get_registered_model("digits").aliases


def _envelope_run(folder):
    statement = json.loads(base64.b64decode(json.loads((folder / "export.intoto.jsonl").read_text())["payload"]))
    return attest.run_context(statement)


def test_the_envelope_beside_the_report_is_the_one_logged_and_binds_both_runs(gate):
    uri, step, _ = gate
    folder = step("run-a", passed=True, folder="a")
    context = _envelope_run(folder)
    client = MlflowClient(uri)
    logged = client.get_run(context.step_run_id)  # the signed step run id is the step's MLflow run
    assert context.pipeline_run_id == "run-a" and logged.data.tags[conv.PIPELINE_RUN_TAG] == "run-a"
    path = client.download_artifacts(context.step_run_id, "export.verdict.intoto.jsonl", str(folder.parent))
    with open(path, "rb") as handle:
        assert handle.read() == (folder / "export.intoto.jsonl").read_bytes()


def test_an_old_pass_replayed_through_a_hand_made_step_run_changes_nothing(gate):
    """Run A passed; run B's export failed. A hand-made step run of B carries A's verdict, its digest tag and its
    envelope: promote in run B still refuses A's pass (signed for A) and B's own fail."""
    uri, step, promote = gate
    old = step("run-a", passed=True, folder="a")
    failed = step("run-b", passed=False, folder="b")
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    parent = client.search_runs([experiment], f"tags.`{conv.PIPELINE_RUN_TAG}` = 'run-b' "
                                "and tags.`skewgate.role` = 'pipeline'")[0].info.run_id
    forged = client.create_run(experiment, run_name="export", tags={
        "mlflow.parentRunId": parent, "skewgate.step": "export", conv.PIPELINE_RUN_TAG: "run-b",
        conv.VERDICT_DIGEST_TAG: Verdict.read(old / "export.json").digest()})
    client.log_artifact(forged.info.run_id, str(old / "export.json"))
    client.log_artifact(forged.info.run_id, str(old / "export.intoto.jsonl"))
    (old / "copy").mkdir()
    (old / "copy" / "export.verdict.intoto.jsonl").write_bytes((old / "export.intoto.jsonl").read_bytes())
    client.log_artifact(forged.info.run_id, str(old / "copy" / "export.verdict.intoto.jsonl"))
    client.set_terminated(forged.info.run_id)

    replayed = promote(old, "run-b")
    assert replayed.status == "fail"
    assert "evidence.export: signature: signed for pipeline run run-a, not this pipeline run run-b" in replayed.message
    this_run = promote(failed, "run-b")
    assert this_run.status == "fail" and "status fail" in this_run.message
    assert "champion" not in _alias(uri)


def test_fail_then_pass_in_one_pipeline_run_promotes_on_the_latest(gate):
    uri, step, promote = gate
    first = step("run-b", passed=False, folder="first")
    retry = step("run-b", passed=True, folder="retry")
    assert _envelope_run(retry).recorded_at_ms > _envelope_run(first).recorded_at_ms
    result = promote(retry, "run-b")
    assert result.status == "pass", result.message
    assert str(_alias(uri)["champion"]) == "1"


def test_pass_then_fail_in_one_pipeline_run_refuses_the_earlier_pass(gate):
    uri, step, promote = gate
    first = step("run-b", passed=True, folder="first")
    step("run-b", passed=False, folder="retry")
    result = promote(first, "run-b")
    assert result.status == "fail" and "superseded: pipeline run run-b holds a later signed export verdict (fail" \
        in result.message
    assert "champion" not in _alias(uri)


def test_an_ad_hoc_verdict_verifies_by_signature_alone(gate):
    uri, step, promote = gate
    folder = step("", passed=True, folder="adhoc")
    assert _envelope_run(folder).pipeline_run_id == ""
    assert promote(folder, "").status == "pass"
    assert str(_alias(uri)["champion"]) == "1"
