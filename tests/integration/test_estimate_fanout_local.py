"""The nightly pipeline with `estimate_accuracy`, run by kfp.local against a real `mlflow server` on a
Hive-partitioned snapshot: as one task, and fanned out (the champion's ONNX file and estimate profile fetched once,
the model run per shard, the shards' counts merged). Both give the verdict one pass over the snapshot gives, and
tag the champion with the night."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_conventions as conv
from skewgate.common.io import sha256_file
from skewgate.common.recording import TrackingOptions
from skewgate.drift.core import DriftOptions, make_profile
from skewgate.drift.stats.profile import save_profile
from skewgate.estimate.core import EstimateOptions, estimate
from skewgate.estimate.nightly.night import NIGHTLY_TAG, NightlyEstimateOptions, run_nightly
from skewgate.pipelines.local import run_locally
from skewgate.pipelines.nightly_drift import nightly_drift_fanout_local, nightly_drift_local
from tests.estimate.simulation import known_truth_files

pytestmark = pytest.mark.integration
NAME = "estimate-fanout"
FEATURES = "score,income"


def _hive(root, x, parts, labels=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for k, rows in enumerate(np.array_split(np.arange(len(x)), parts)):
        (root / f"hour={k:02d}").mkdir(parents=True)
        columns = {"score": x[rows, 0], "income": x[rows, 1]} | ({"label": labels[rows]} if labels is not None else {})
        pq.write_table(pa.table(columns), root / f"hour={k:02d}" / "part-0.parquet")
    return root


@pytest.fixture(scope="module")
def champion(tmp_path_factory, mlflow_url):
    """A champion carrying its ONNX file (by digest), a drift profile and an estimate profile, as promote leaves
    it; and tonight's snapshot: the boundary shift (accuracy falls), in five files."""
    tmp = tmp_path_factory.mktemp("champion")
    files = known_truth_files(tmp)
    reference = np.load(files["reference"])
    _hive(tmp / "reference", reference["x"], 3, reference["labels"])
    drift_profile = save_profile(make_profile(_hive(tmp / "drift-reference", reference["x"], 2),
                                              options=DriftOptions()), tmp / "reference.profile")
    estimate(onnx=files["model"], reference=tmp / "reference", current=files["ignored"],
             profile_out=tmp / "estimate.profile",
             options=EstimateOptions(features=tuple(FEATURES.split(",")), labels_key="label"))
    client = MlflowClient(mlflow_url)
    experiment = client.create_experiment(NAME)
    run = client.create_run(experiment)
    client.log_artifact(run.info.run_id, str(files["model"]), "onnx")
    client.log_artifact(run.info.run_id, str(drift_profile), "profile")
    client.log_artifact(run.info.run_id, str(tmp / "estimate.profile"), "profile")
    client.create_registered_model(NAME)
    version = client.create_model_version(NAME, source=f"{run.info.artifact_uri}/onnx", run_id=run.info.run_id)
    client.set_registered_model_alias(NAME, "champion", version.version)
    for tag, value in {conv.ONNX_DIGEST_TAG: sha256_file(files["model"]),
                       conv.PROFILE_URI_TAG: f"{run.info.artifact_uri}/profile/reference.profile",
                       conv.PROFILE_SHA_TAG: sha256_file(drift_profile),
                       conv.ESTIMATE_PROFILE_URI_TAG: f"{run.info.artifact_uri}/profile/estimate.profile",
                       conv.ESTIMATE_PROFILE_SHA_TAG: sha256_file(tmp / "estimate.profile")}.items():
        client.set_model_version_tag(NAME, version.version, tag, value)
    snapshot = _hive(tmp / "snapshot", np.load(files["boundary"])["x"], 5)
    return snapshot, files


@pytest.mark.parametrize("pipeline", [nightly_drift_local, nightly_drift_fanout_local], ids=["one-task", "fanned-out"])
def test_the_nightly_pipeline_estimates_what_one_pass_does_and_fails_on_the_accuracy_drop(champion, mlflow_url,
                                                                                           tmp_path, pipeline):
    snapshot, files = champion
    tracking = TrackingOptions(uri=mlflow_url, experiment=NAME)
    one_pass = run_nightly(model_name=NAME, current=snapshot, run_date="2026-12-01T02:00:00+00:00",
                           options=NightlyEstimateOptions(estimate=EstimateOptions(features=tuple(FEATURES.split(",")))),
                           tracking=tracking).verdict
    assert one_pass.status == "fail", one_pass.message

    arguments = {"serving_snapshot": str(snapshot), "model_name": NAME, "mlflow_tracking_uri": mlflow_url,
                 "estimate_accuracy": True, "estimate_features": FEATURES}
    run = run_locally(pipeline, arguments, pipeline_root=tmp_path / "kfp",
                      log_file=tmp_path / "kfp.log")
    assert not run.succeeded and run.output != "pass"  # the accuracy drop (and the drift of x₀) fail the night
    from skewgate.common import mlflow_log

    _, steps = mlflow_log.connect(mlflow_url, experiment=NAME).pipeline_verdicts(since_ms=run.started_ms)
    fanned = steps["nightly-estimate"]
    assert fanned.status == "fail", fanned.message
    assert [(r["low"], r["high"]) for r in fanned.details["table"]] == [
        (r["low"], r["high"]) for r in one_pass.details["table"]]  # the same draws: one stream per file
    assert fanned.details["estimated_accuracy"] == pytest.approx(one_pass.details["estimated_accuracy"], rel=1e-12)
    assert fanned.subject.data == one_pass.subject.data
    low, high = fanned.details["estimated_interval"]
    assert low <= files["boundary_realised"] <= high
    tags = MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion").tags
    assert tags[NIGHTLY_TAG].startswith("fail ")
    assert len(json.loads(tags[conv.ESTIMATE_HISTORY_TAG])) == 1  # the same snapshot: one entry, not two
