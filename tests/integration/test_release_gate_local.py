"""The release gate run by kfp.local against a real `mlflow server` on 127.0.0.1, for the demo's good and
defective candidates: what it leaves in MLflow is what users read."""

import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_log
from skewgate.demo.digits import train_and_save
from skewgate.pipelines.local import run_release_gate_locally

pytestmark = pytest.mark.integration
NAME = "digits-it"


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    return train_and_save(tmp_path_factory.mktemp("candidates"), epochs=5)


@pytest.fixture(scope="module")
def runs(candidates, mlflow_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("kfp")
    tracking = mlflow_log.connect(mlflow_url, experiment=NAME)
    outcome = {}
    for label in ("good", "defective"):
        run = run_release_gate_locally(candidate_model=getattr(candidates, label), eval_data=candidates.examples,
                                       model_name=NAME, tracking_uri=mlflow_url, pipeline_root=root,
                                       log_file=root / "kfp.log")
        parent, verdicts = tracking.pipeline_verdicts(since_ms=run.started_ms)
        outcome[label] = (run, parent, verdicts)
    return outcome


def test_good_candidate_is_promoted_and_the_run_succeeds(runs, mlflow_url):
    run, _parent, verdicts = runs["good"]
    assert run.succeeded
    assert {step: v.status for step, v in verdicts.items()} == {"export": "pass", "promote": "pass"}
    client = MlflowClient(mlflow_url)
    version = client.get_model_version_by_alias(NAME, "champion")
    assert version.version == verdicts["promote"].details["version"]
    assert version.tags["skewgate.export.status"] == "pass"
    assert version.tags["skewgate.onnx_sha256"] == verdicts["export"].subject.sha256
    assert "skewgate.verdict_sha256.export" in version.tags


def test_defective_candidate_is_blocked_and_the_run_fails(runs, mlflow_url):
    run, _parent, verdicts = runs["defective"]
    assert not run.succeeded
    assert verdicts["export"].status == "fail"
    assert verdicts["promote"].status == "fail"
    assert "lint.batchnorm_eval_mode" in verdicts["promote"].message
    client = MlflowClient(mlflow_url)
    refused = verdicts["promote"].details["version"]
    assert client.get_model_version(NAME, refused).tags["skewgate.promotion.status"] == "refused"
    # the champion is still the good candidate's version
    assert client.get_model_version_by_alias(NAME, "champion").version == runs["good"][2]["promote"].details[
        "version"]


def test_every_step_left_a_nested_run_with_metrics_and_artifacts(runs, mlflow_url):
    client = MlflowClient(mlflow_url)
    for _run, parent, _verdicts in runs.values():
        children = client.search_runs([client.get_experiment_by_name(NAME).experiment_id],
                                      f"tags.`mlflow.parentRunId` = '{parent}'")
        steps = {c.data.tags["skewgate.step"]: c for c in children}
        assert set(steps) == {"export", "promote"}
        export = steps["export"]
        assert "export.outputs_match.linear" in export.data.metrics
        assert {a.path for a in client.list_artifacts(export.info.run_id)} >= {
            "export.verdict.json", "checks.json", "tensor_stats.json"}
        assert "onnx" in {a.path for a in client.list_artifacts(steps["promote"].info.run_id)}


def test_promotion_log_holds_both_attempts(runs, mlflow_url, tmp_path):
    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name(NAME).experiment_id
    log_run = client.search_runs([experiment], "tags.`skewgate.kind` = 'promotion-log'")[0]
    lines = (tmp_path / "promotions.jsonl")
    client.download_artifacts(log_run.info.run_id, "promotions.jsonl", str(tmp_path))
    records = [__import__("json").loads(line) for line in lines.read_text().splitlines()]
    assert [r["promoted"] for r in records] == [True, False]
