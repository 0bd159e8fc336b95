"""The nightly drift pipeline over a Hive-partitioned snapshot, run by kfp.local: once as one task, once fanned out
(a ParallelFor of partial-statistics tasks and one merge task). Same data, same verdict."""

from __future__ import annotations

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_log
from skewgate.drift.core import DriftOptions, make_profile
from skewgate.drift.run import PROFILE_SHA_TAG, PROFILE_URI_TAG
from skewgate.drift.stats.profile import save_profile
from skewgate.pipelines.local import run_locally
from skewgate.pipelines.nightly_drift import nightly_drift_fanout_local, nightly_drift_local
from tests.drift.conftest import make_frame

pytestmark = pytest.mark.integration
NAME = "fanout-model"


def _hive(root, frame, parts):
    for k, rows in enumerate(np.array_split(np.arange(len(frame)), parts)):
        (root / f"hour={k:02d}").mkdir(parents=True)
        frame.iloc[rows].to_parquet(root / f"hour={k:02d}" / "part-0.parquet")
    return root


@pytest.fixture(scope="module")
def champion(tmp_path_factory):
    """A registry (sqlite store) whose champion carries a drift profile, as promote leaves it."""
    tmp = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    profile = save_profile(make_profile(_hive(tmp / "reference", make_frame(6000, seed=1), 3),
                                        options=DriftOptions()), tmp / "reference.profile")
    client = MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment(NAME, artifact_location=str(tmp / "artifacts"))
    run = client.create_run(experiment)
    client.log_artifact(run.info.run_id, str(profile), "profile")
    client.create_registered_model(NAME)
    version = client.create_model_version(NAME, source=f"{run.info.artifact_uri}/profile", run_id=run.info.run_id)
    client.set_registered_model_alias(NAME, "champion", version.version)
    from skewgate.common.io import sha256_file

    client.set_model_version_tag(NAME, version.version, PROFILE_URI_TAG,
                                 f"{run.info.artifact_uri}/profile/reference.profile")
    client.set_model_version_tag(NAME, version.version, PROFILE_SHA_TAG, sha256_file(profile))
    return uri


@pytest.mark.parametrize(("current", "status"), [({}, "pass"), ({"shift": 0.5}, "fail")], ids=["healthy", "drifted"])
def test_fanned_out_nightly_gives_the_single_task_verdict(champion, tmp_path, current, status):
    snapshot = _hive(tmp_path / "snapshot", make_frame(4500, seed=2, **current), 5)
    tracking = mlflow_log.connect(champion, experiment=NAME)
    arguments = {"serving_snapshot": str(snapshot), "model_name": NAME, "mlflow_tracking_uri": champion}
    verdicts = {}
    for label, pipeline, extra in (("single", nightly_drift_local, {}),
                                   ("fanout", nightly_drift_fanout_local, {})):  # 2 shards
        run = run_locally(pipeline, arguments | extra, pipeline_root=tmp_path / label, log_file=tmp_path / "kfp.log")
        assert run.succeeded == (status != "fail")
        _, steps = tracking.pipeline_verdicts(since_ms=run.started_ms)
        verdicts[label] = steps["nightly-drift"]
    single, fanout = verdicts["single"], verdicts["fanout"]
    assert single.status == fanout.status == status
    assert fanout.details["shards"] == 2 and single.details["shards"] == 1
    assert [(c.name, c.passed) for c in fanout.checks] == [(c.name, c.passed) for c in single.checks]
    assert fanout.subject.data == single.subject.data  # the same snapshot, hashed the same way
    assert {r["feature"]: r["statistic"] for r in fanout.details["features"]} == pytest.approx(
        {r["feature"]: r["statistic"] for r in single.details["features"]})
    assert fanout.details["mmd"]["value"] == pytest.approx(single.details["mmd"]["value"], rel=1e-6)
    champion_tags = MlflowClient(champion, registry_uri=champion).get_model_version_by_alias(NAME, "champion").tags
    assert champion_tags["skewgate.drift.nightly"].split()[0] == status
