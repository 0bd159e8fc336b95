"""The release gate and the nightly drift check run by kfp.local against a real `mlflow server` on 127.0.0.1,
for the demo's candidates and serving data: what they leave in MLflow is what users read."""


import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_log
from skewgate.demo.digits import train_and_save
from skewgate.pipelines.local import run_locally
from skewgate.pipelines.nightly_drift import nightly_drift_local
from skewgate.pipelines.release_gate import release_gate
from tests.integration.conftest import signing_keys
from tests.support.promotion_log import read_promotion_log

pytestmark = pytest.mark.integration
NAME = "digits-it"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return train_and_save(tmp_path_factory.mktemp("candidates"), epochs=5)


@pytest.fixture(scope="module")
def runs(data, mlflow_url, tmp_path_factory):
    """good, defective and weak release gates (the good one's estimating its accuracy, so the champion carries an
    estimate profile), then nightly drift and estimate on healthy and on unscaled serving data."""
    root = tmp_path_factory.mktemp("kfp")
    tracking = mlflow_log.connect(mlflow_url, experiment=NAME)
    public_key = signing_keys(tmp_path_factory.mktemp("keys"))
    plan = {
        label: (release_gate, {"candidate_model": str(getattr(data, label)), "eval_data": str(data.examples),
                               "calibration_data": str(data.calibration),
                               "reference_data": str(data.reference), "current_data": str(data.current),
                               "model_name": NAME, "mlflow_tracking_uri": mlflow_url,
                               "trusted_public_keys": public_key, "estimate_accuracy": label == "good"})
        for label in ("good", "defective", "weak")
    }
    plan |= {
        f"nightly-{label}": (nightly_drift_local, {"serving_snapshot": str(snapshot), "model_name": NAME,
                                                   "mlflow_tracking_uri": mlflow_url, "estimate_accuracy": True})
        for label, snapshot in (("healthy", data.current), ("bug", data.serving_bug))
    }
    outcome = {}
    for label, (pipeline, arguments) in plan.items():
        run = run_locally(pipeline, arguments, pipeline_root=root, log_file=root / "kfp.log")
        parent, verdicts = tracking.pipeline_verdicts(since_ms=run.started_ms)
        outcome[label] = (run, parent, verdicts)
    outcome["public_key"] = public_key
    return outcome


def _statuses(verdicts):
    return {step: v.status for step, v in verdicts.items()}


def test_good_candidate_is_promoted_and_the_run_succeeds(runs, mlflow_url):
    run, _parent, verdicts = runs["good"]
    assert run.succeeded and run.output == "promoted"
    assert _statuses(verdicts) == {"export": "pass", "calibrate": "pass", "drift": "pass", "parity": "pass",
                                   "probe": "pass", "compare": "pass", "estimate": "pass", "promote": "pass"}
    assert "first promotion" in verdicts["compare"].check("champion").detail
    assert verdicts["promote"].check("evidence.estimate").passed  # estimated: then required
    client = MlflowClient(mlflow_url)
    version = client.get_model_version_by_alias(NAME, "champion")
    assert version.version == verdicts["promote"].details["version"]
    # a handful of tags (the nightly runs of this session add theirs, two); every step's row is in the description
    nightly = {"skewgate.drift.nightly", "skewgate.drift.series.state", "skewgate.estimate.nightly",
               "skewgate.estimate.history"}
    assert set(version.tags) - nightly == {
        "skewgate.onnx_sha256", "skewgate.attestation.champion.uri", "skewgate.promotion.champion.status",
        "skewgate.promotion.champion.reason", "skewgate.drift.profile_uri", "skewgate.drift.profile_sha256",
        "skewgate.estimate.profile_uri", "skewgate.estimate.profile_sha256"}
    assert version.tags["skewgate.estimate.profile_sha256"] == \
        verdicts["estimate"].registry_tags["skewgate.estimate.profile_sha256"]
    assert version.tags["skewgate.onnx_sha256"] == verdicts["export"].subject.sha256
    assert verdicts["drift"].subject.sha256 == verdicts["export"].subject.sha256
    assert verdicts["probe"].subject.sha256 == verdicts["export"].subject.sha256
    for step in ("export", "calibrate", "drift", "parity", "probe", "compare", "estimate"):
        assert f"| {step} | pass |" in version.description
    assert verdicts["parity"].details["pairs"] == ["torch_vs_fp32", "fp32_vs_int8"]


def test_defective_candidate_is_blocked_and_the_run_fails(runs, mlflow_url):
    run, _parent, verdicts = runs["defective"]
    assert not run.succeeded
    assert _statuses(verdicts) == {"export": "fail", "calibrate": "pass", "drift": "pass", "parity": "fail",
                                   "probe": "pass", "compare": "pass", "promote": "fail"}
    # parity names where the training-mode graph departs from the exported one
    assert verdicts["parity"].details["torch_vs_fp32"]["first_divergence"]["module"] == "features.1"  # BatchNorm
    assert "lint.batchnorm_eval_mode" in verdicts["promote"].message
    client = MlflowClient(mlflow_url)
    refused = verdicts["promote"].details["version"]
    assert client.get_model_version(NAME, refused).tags["skewgate.promotion.champion.status"] == "refused"
    # the champion is still the good candidate's version
    good_version = runs["good"][2]["promote"].details["version"]
    assert client.get_model_version_by_alias(NAME, "champion").version == good_version


def test_weak_candidate_is_blocked_by_compare_alone(runs, mlflow_url, data):
    run, _parent, verdicts = runs["weak"]
    assert data.weak_accuracy < data.accuracy - 0.03
    assert not run.succeeded
    assert _statuses(verdicts) == {"export": "pass", "calibrate": "pass", "drift": "pass", "parity": "pass",
                                   "probe": "pass", "compare": "fail", "promote": "fail"}
    compare = verdicts["compare"]
    good_version = runs["good"][2]["promote"].details["version"]
    assert compare.details["champion_version"] == good_version
    check = compare.check("accuracy.vs_champion")  # even the interval's best case regresses beyond the limit
    assert check.value > check.limit
    assert "regression beyond the allowance" in compare.check("accuracy.vs_champion").detail
    assert "evidence.compare: status fail: failed: accuracy.vs_champion" in verdicts["promote"].message
    assert MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion").version == good_version


def test_every_step_left_a_nested_run_with_metrics_and_artifacts(runs, mlflow_url):
    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name(NAME).experiment_id
    for label in ("good", "defective", "weak"):
        parent = runs[label][1]
        children = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent}'")
        steps = {c.data.tags["skewgate.step"]: c for c in children}
        estimated = {"estimate"} if label == "good" else set()  # the one gate run with estimate_accuracy
        assert set(steps) == {"export", "calibrate", "drift", "parity", "probe", "compare", "promote", *estimated}
        assert {a.path for a in client.list_artifacts(steps["compare"].info.run_id)} >= {
            "compare.verdict.json", "comparison.json", "comparison.md"}
        assert "export.outputs_match.linear" in steps["export"].data.metrics
        assert {a.path for a in client.list_artifacts(steps["export"].info.run_id)} >= {
            "export.verdict.json", "checks.json", "tensor_stats.json"}
        assert "drift.ks_drift" in steps["drift"].data.metrics
        assert {a.path for a in client.list_artifacts(steps["drift"].info.run_id)} >= {
            "drift.verdict.json", "features.json", "coverage_heatmap.png", "drift_report.html", "profile"}
        assert {a.path for a in client.list_artifacts(steps["promote"].info.run_id)} >= {"model", "attestations"}
        assert "calibrate.accuracy_drop" in steps["calibrate"].data.metrics
        assert {a.path for a in client.list_artifacts(steps["calibrate"].info.run_id)} >= {
            "calibrate.verdict.json", "calibration_tensors.json", "calibration_trials.json",
            "calibration_histograms.png", "calibration_report.html"}


def test_nightly_drift_tags_the_champion_and_fails_on_drift(runs, mlflow_url):
    healthy_run, _, healthy = runs["nightly-healthy"]
    bug_run, _, bug = runs["nightly-bug"]
    assert healthy_run.succeeded and _statuses(healthy) == {"nightly-drift": "pass", "nightly-estimate": "pass"}
    assert not bug_run.succeeded and _statuses(bug) == {"nightly-drift": "fail", "nightly-estimate": "fail"}
    # the estimate from the profile the release gate stored: unscaled pixels score outside what it calibrated
    assert "not judged" in bug["nightly-estimate"].check("performance.estimated_drop").detail
    # the series decides the night (#33): its alarm fails the run; tonight's joint drift is reported beside it
    assert bug["nightly-drift"].message == "failed: series.anytime_valid"
    assert not bug["nightly-drift"].check("joint_drift").passed
    assert bug["nightly-drift"].details["reference_from_profile"] is True
    champion = MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion")
    status, date, *run = champion.tags["skewgate.drift.nightly"].split()  # the latest nightly run
    assert status == "fail" and date and run[0] == "run"


def test_promotion_log_holds_both_attempts(runs, mlflow_url):
    records = read_promotion_log(mlflow_log.connect(mlflow_url, experiment=NAME))
    assert [r["promoted"] for r in records] == [True, False, False]


def test_the_champion_loads_with_pyfunc_and_predicts_what_onnxruntime_computes(runs, data, mlflow_url,
                                                                               monkeypatch):
    import mlflow.pyfunc
    import numpy as np
    import onnxruntime

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_url)  # the environment, as a serving process configures it
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", mlflow_url)
    model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    local = mlflow.artifacts.download_artifacts(f"models:/{NAME}@champion", tracking_uri=mlflow_url)
    pixels = np.load(data.examples)["pixels"][:16]
    expected = onnxruntime.InferenceSession(f"{local}/model.onnx").run(None, {"pixels": pixels})[0]
    (output,) = model.predict({"pixels": pixels}).values()
    np.testing.assert_allclose(np.asarray(output), expected, rtol=0, atol=0)
    # the INT8 model that calibrate wrote and parity judged is champion of NAME-int8, paired with this version
    champion = MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion")
    int8 = MlflowClient(mlflow_url).get_model_version_by_alias(f"{NAME}-int8", "champion")
    assert int8.tags["skewgate.fp32.version"] == str(champion.version)
    assert int8.tags["skewgate.onnx_sha256"] == runs["good"][2]["calibrate"].registry_tags[
        "skewgate.calibrate.int8_sha256"]
    int8_model = mlflow.pyfunc.load_model(f"models:/{NAME}-int8@champion")
    (int8_output,) = int8_model.predict({"pixels": pixels}).values()
    assert (np.asarray(int8_output).argmax(1) == expected.argmax(1)).mean() >= 0.9


def test_the_champion_verifies_from_the_registry_alone(runs, mlflow_url, tmp_path):
    from skewgate.cli import main

    public = tmp_path / "trusted.pub"
    public.write_text(runs["public_key"], encoding="utf-8")
    assert main(["verify", "--model-name", NAME, "--tracking-uri", mlflow_url, "--trusted-key", str(public),
                 "--report", str(tmp_path / "verify.json")]) == 0


@pytest.mark.parametrize(("label", "outcome", "status"), [
    ("good", "promoted", "FINISHED"), ("defective", "blocked", "FAILED"), ("weak", "blocked", "FAILED"),
    ("nightly-healthy", "pass", "FINISHED"), ("nightly-bug", "drift", "FAILED"),
])
def test_parent_runs_end_with_their_outcome(runs, mlflow_url, label, outcome, status):
    """The exit handler ended each pipeline's parent run: the runs table shows which promoted, which was
    blocked, and why."""
    _run, parent_id, verdicts = runs[label]
    parent = MlflowClient(mlflow_url).get_run(parent_id)
    assert parent.info.status == status and parent.info.end_time
    assert parent.data.tags["skewgate.outcome"] == outcome
    assert parent.data.tags["skewgate.reason"]
    if label in {"good", "defective", "weak"}:
        assert parent.data.tags["skewgate.candidate_sha256"] == verdicts["export"].subject.sha256
        assert parent.data.metrics["gate.promoted"] == float(outcome == "promoted")
    if label == "defective":
        assert "lint.batchnorm_eval_mode" in parent.data.tags["skewgate.reason"]


def test_no_skewgate_run_is_left_running(runs, mlflow_url):
    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name(NAME)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    running = client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'")
    assert [r.info.run_name for r in running] == []  # the promotion-log run included


def test_mlflow_models_serve_answers_with_what_the_gate_promoted(runs, data, mlflow_url, tmp_path):
    """`mlflow models serve` on the champion, as a downstream team would run it, on 127.0.0.1."""
    import json
    import os
    import subprocess
    import sys
    import urllib.request

    import numpy as np
    import onnxruntime

    from skewgate.common.processes import answers, free_port, stop, wait_until_up

    port = free_port()
    # `--env-manager local` execs `uvicorn` from PATH: the virtual environment's bin, as after `activate`
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_url, "MLFLOW_REGISTRY_URI": mlflow_url,
           "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"}
    log_path = tmp_path / "serve.log"
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/{NAME}@champion",
               "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        try:
            wait_until_up(process, lambda: answers(f"http://127.0.0.1:{port}/ping"), what="mlflow models serve",
                          log_path=log_path, deadline_s=180)
            pixels = np.load(data.examples)["pixels"][:8]
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/invocations", data=json.dumps({"inputs": {"pixels": pixels.tolist()}})
                .encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                predictions = json.loads(response.read())["predictions"]
        finally:
            stop(process)
    local = tmp_path / "champion"
    MlflowClient(mlflow_url).download_artifacts(
        MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion").run_id, "model", str(local))
    expected = onnxruntime.InferenceSession(str(local / "model" / "model.onnx")).run(None, {"pixels": pixels})[0]
    (served,) = predictions.values() if isinstance(predictions, dict) else (predictions,)
    np.testing.assert_allclose(np.asarray(served, dtype=np.float32), expected, rtol=1e-6, atol=1e-6)
