"""`evaluate_and_record`: whatever happens, a verdict comes back (with the envelope it was logged with), and only a
recorded one keeps its status."""

import json
import re

import pytest
from mlflow import MlflowClient

from skewgate.common import attest
from skewgate.common.errors import InputError
from skewgate.common.recording import TrackingOptions, evaluate_and_record, sign_verdict
from skewgate.common.verdict import Check, Subject, Verdict

SUBJECT = Subject(artifact="model.onnx", sha256="ab" * 32)


def passing(run):
    return Verdict.from_checks("export", [Check("opset", passed=True, value=17.0)], subject=SUBJECT)


def _runs(uri):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("skewgate")
    return client, client.search_runs([experiment.experiment_id], "tags.`skewgate.step` = 'export'")


def test_without_a_tracking_uri_the_verdict_is_evaluated_and_nothing_is_recorded():
    seen = []
    verdict = evaluate_and_record("export", lambda run: seen.append(run) or passing(run), TrackingOptions()).verdict
    assert verdict.status == "pass" and seen == [None]


@pytest.mark.parametrize(("error", "message"), [
    (InputError("model.pt2", expected="a torch.export program", found="no such file"),
     "model.pt2: expected a torch.export program, found no such file"),
    (RuntimeError("CUDA out of memory"), "RuntimeError: CUDA out of memory"),
], ids=["skewgate-error", "unexpected-error"])
def test_an_evaluation_that_raises_is_an_error_verdict_naming_why(error, message):
    def evaluate(run):
        raise error

    verdict = evaluate_and_record("export", evaluate, TrackingOptions()).verdict
    assert verdict.status == "error" and verdict.step == "export"
    assert verdict.message == message


def test_the_verdict_and_its_envelope_are_recorded_in_the_step_run(mlflow_db, tmp_path):
    key_path, _ = attest.generate_keys(tmp_path / "keys")
    uri = mlflow_db
    options = TrackingOptions(uri=uri, pipeline_run_id="job-1", signing_key=str(key_path))
    result = evaluate_and_record("export", passing, options)
    verdict = result.verdict
    assert verdict.status == "pass"
    client, [run] = _runs(uri)
    assert run.data.tags["skewgate.status"] == "pass"
    assert run.data.tags["skewgate.verdict_sha256"] == verdict.digest()
    logged = Verdict.read(client.download_artifacts(run.info.run_id, "export.verdict.json", str(tmp_path)))
    assert logged.digest() == verdict.digest()
    envelope = client.download_artifacts(run.info.run_id, "export.verdict.intoto.jsonl", str(tmp_path))
    # every writer stores the same bytes: the CLI's file beside --report and the component's output (both write
    # the result's envelope), this artifact
    expected = attest.envelope_bytes(result.envelope)
    with open(envelope, "rb") as handle:
        assert handle.read() == expected
    trusted = attest.load_trusted_keys([tmp_path / "keys" / attest.PUBLIC_KEY_FILE])
    assert attest.verify_verdict(verdict, json.loads(expected), trusted, artifact_sha256=SUBJECT.sha256,
                                 pipeline_run_id="job-1")
    context = attest.open_verdict(json.loads(expected), trusted).context  # the signature binds both runs
    assert (context.pipeline_run_id, context.step_run_id) == ("job-1", run.info.run_id)


def test_an_unreachable_tracking_server_makes_the_verdict_an_error_naming_it():
    from skewgate.common.processes import free_port

    uri = f"http://127.0.0.1:{free_port()}"
    calls = []
    verdict = evaluate_and_record("export", lambda run: calls.append(run) or passing(run),
                                  TrackingOptions(uri=uri, deadline_s=0.5)).verdict
    assert verdict.status == "error" and calls == []
    assert re.search(rf"MLflow at {re.escape(uri)} unreachable", verdict.message)


def test_a_verdict_that_could_not_be_recorded_does_not_keep_its_pass(mlflow_db):
    """An unrecorded verdict must not count as evidence: the run is deleted under the step, so logging fails."""
    uri = mlflow_db

    def evaluate(run):
        run.tracking.client.delete_run(run.run_id)
        return passing(run)

    verdict = evaluate_and_record("export", evaluate, TrackingOptions(uri=uri)).verdict
    assert verdict.status == "error"
    assert f"MLflow at {uri}: log the export verdict failed" in verdict.message


def test_a_failed_evaluation_keeps_its_reason_when_recording_fails_too(mlflow_db):
    uri = mlflow_db

    def evaluate(run):
        run.tracking.client.delete_run(run.run_id)
        raise InputError("model.pt2", expected="a torch.export program", found="no such file")

    verdict = evaluate_and_record("export", evaluate, TrackingOptions(uri=uri)).verdict
    assert verdict.status == "error"
    assert verdict.message.startswith("model.pt2: expected a torch.export program, found no such file; MLflow at ")


@pytest.mark.parametrize(("verdict", "signed"), [
    (Verdict.from_checks("export", [Check("opset", passed=True)], subject=SUBJECT), True),
    (Verdict.from_checks("export", [Check("opset", passed=False)], subject=SUBJECT), True),
    (Verdict.from_checks("export", [Check("opset", passed=True)], subject=None), False),
    (Verdict.error("export", "could not evaluate"), False),
], ids=["pass-is-signed", "fail-is-signed", "no-subject-no-envelope", "error-no-envelope"])
def test_only_a_judgement_about_an_artifact_is_signed(tmp_path, verdict, signed):
    key_path, _ = attest.generate_keys(tmp_path)
    assert (sign_verdict(verdict, str(key_path)) is not None) == signed


def test_without_a_key_nothing_is_signed(monkeypatch):
    monkeypatch.delenv(attest.SIGNING_KEY_ENV, raising=False)
    assert sign_verdict(passing(None)) is None


def test_a_failing_verdict_ends_its_step_run_failed_and_a_passing_one_finished(mlflow_db):
    uri = mlflow_db
    failing = Verdict.from_checks("export", [Check("opset", passed=False)], subject=SUBJECT)
    assert evaluate_and_record("export", lambda run: failing, TrackingOptions(uri=uri, pipeline_run_id="j1")
                               ).verdict.status == "fail"
    assert evaluate_and_record("export", passing, TrackingOptions(uri=uri, pipeline_run_id="j2")
                               ).verdict.status == "pass"
    _, runs = _runs(uri)
    assert {r.data.tags["skewgate.status"]: r.info.status for r in runs} == {"fail": "FAILED", "pass": "FINISHED"}


def test_the_settings_and_inputs_a_step_passes_are_logged_as_params_and_datasets(mlflow_db, tmp_path):
    """A step's `run` (e.g. skewgate/export/run.py) passes its options dataclass and its input paths: the step run
    gets them as params and as datasets located by path (an input not given, None or "", is left out)."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class ExportOptions:
        tolerances: tuple[str, ...] = ()
        max_samples: int = 64

    uri = mlflow_db
    data = tmp_path / "eval.npz"
    data.write_bytes(b"x")
    subject = Subject(artifact=str(tmp_path / "model.onnx"), sha256="ab" * 32, data={"inputs": "cd" * 32},
                      source=str(tmp_path / "model.pt2"), source_sha256="ef" * 32)

    def evaluate(_run):
        return Verdict.from_checks("export", [Check("opset", passed=True)], subject=subject)

    verdict = evaluate_and_record("export", evaluate, TrackingOptions(uri=uri, pipeline_run_id="job-s"),
                                  settings=ExportOptions(max_samples=8),
                                  inputs={"inputs": data, "model": tmp_path / "model.pt2", "labels": None, "x": ""}
                                  ).verdict
    assert verdict.status == "pass"
    client, [logged] = _runs(uri)
    assert logged.data.params == {"tolerances": "[]", "max_samples": "8"}
    datasets = {i.dataset.name: i for i in client.get_run(logged.info.run_id).inputs.dataset_inputs}
    assert set(datasets) == {"model.onnx", "model.pt2", "eval.npz"}
    assert json.loads(datasets["eval.npz"].dataset.source) == {"uri": str(data)}
    assert datasets["eval.npz"].dataset.digest == "cd" * 6


def test_explicit_settings_are_logged_even_when_the_step_errors(mlflow_db):
    uri = mlflow_db

    def evaluate(run):
        raise InputError("model.pt2", expected="a torch.export program", found="no such file")

    verdict = evaluate_and_record("export", evaluate, TrackingOptions(uri=uri, pipeline_run_id="job-e"),
                                  settings={"max_samples": 8, "tracking_uri": uri}).verdict
    assert verdict.status == "error"
    _, [logged] = _runs(uri)
    assert logged.data.params == {"max_samples": "8"} and logged.info.status == "FAILED"


def test_an_unexpected_exception_fails_closed_and_is_logged_at_error_with_its_traceback(caplog):
    def evaluate(_run):
        return {}["missing"]  # a bug in a step

    with caplog.at_level("ERROR", logger="skewgate.common.recording"):
        verdict = evaluate_and_record("export", evaluate, TrackingOptions()).verdict
    assert verdict.status == "error" and verdict.message == "KeyError: 'missing'"
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "export: unexpected KeyError" in record.getMessage() and record.exc_info is not None


def test_a_mistyped_path_in_an_ad_hoc_call_is_an_error_recorded_nowhere(mlflow_db, tmp_path):
    """Each typo used to leave a `skewgate-cli · error` run behind (47 runs after a few mistakes)."""
    uri, seen = mlflow_db, []
    missing = tmp_path / "modle.onnx"
    result = evaluate_and_record("export", lambda run: seen.append(run) or passing(run), TrackingOptions(uri=uri),
                                 inputs={"onnx": missing, "reference": None, "current": "s3://bucket/x/*.parquet"})
    assert result.verdict.status == "error" and seen == []
    assert result.verdict.message == f"{missing}: expected the onnx input: an existing file or directory, " \
                                     "found no such path"
    assert MlflowClient(uri).get_experiment_by_name("skewgate") is None  # not even an experiment was made
    # a path that exists, or a call inside a pipeline run (whose parent run shows the failed step), is recorded
    present = tmp_path / "model.onnx"
    present.write_bytes(b"x")
    evaluate_and_record("export", passing, TrackingOptions(uri=uri), inputs={"onnx": present})
    failed = evaluate_and_record("export", passing, TrackingOptions(uri=uri, pipeline_run_id="j1"),
                                 inputs={"onnx": missing})
    assert failed.verdict.status == "pass"  # the step itself decides what a missing input means there
    assert len(_runs(uri)[1]) == 2
