"""From the gate to the nights on a real `mlflow server`: `skewgate estimate --profile-out` in the candidate's
evidence, `skewgate promote` records the profile with the version, and the nightly estimate reads it back (no
labels), estimates from it, and tags the champion with the night and its history."""

import json

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common import mlflow_conventions as conv
from skewgate.common.recording import TrackingOptions
from skewgate.estimate.nightly.night import HISTORY_TAG, NIGHTLY_TAG, NightlyEstimateOptions, run_nightly
from tests.estimate.simulation import known_truth_files

pytestmark = pytest.mark.integration
NAME = "estimated-clf"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return known_truth_files(tmp_path_factory.mktemp("estimate"))


def test_the_champion_carries_its_estimate_profile_and_a_night_estimates_from_it(files, keys, mlflow_url, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("SKEWGATE_SIGNING_KEY", str(keys[0]))
    verdicts = tmp_path / "verdicts"
    verdicts.mkdir()
    tracked = ["--tracking-uri", mlflow_url, "--experiment", NAME]
    assert main(["estimate", "--onnx", str(files["model"]), "--reference", str(files["reference"]),
                 "--current", str(files["ignored"]), "--profile-out", str(tmp_path / "estimate.profile"),
                 "--report", str(verdicts / "estimate.json"), *tracked]) == 0
    assert main(["promote", "--model-name", NAME, "--onnx", str(files["model"]), "--verdicts", str(verdicts),
                 "--require", "estimate", "--trusted-key", str(keys[1]), *tracked]) == 0
    client = MlflowClient(mlflow_url)
    tags = client.get_model_version_by_alias(NAME, "champion").tags
    assert tags[conv.ESTIMATE_PROFILE_SHA_TAG] == json.loads((verdicts / "estimate.json").read_text())[
        "registry_tags"][conv.ESTIMATE_PROFILE_SHA_TAG]
    assert tags[conv.ESTIMATE_PROFILE_URI_TAG].endswith("/profile/estimate.profile")

    result = run_nightly(model_name=NAME, current=files["boundary"], run_date="2026-12-01T02:00:00+00:00",
                         options=NightlyEstimateOptions(), tracking=TrackingOptions(uri=mlflow_url, experiment=NAME),
                         history_plot=tmp_path / "nights.png")
    verdict = result.verdict
    assert verdict.status == "fail", verdict.message
    low, high = verdict.details["estimated_interval"]
    assert low <= files["boundary_realised"] <= high
    assert verdict.details["profile"]["sha256"] == tags[conv.ESTIMATE_PROFILE_SHA_TAG]
    after = client.get_model_version_by_alias(NAME, "champion").tags
    assert after[NIGHTLY_TAG].startswith("fail 2026-12-01T02:00:00+00:00 accuracy ")
    assert [n["status"] for n in json.loads(after[HISTORY_TAG])] == ["fail"]
    run = client.get_run(after[NIGHTLY_TAG].split(" run ")[-1])  # the tag names the night's step run
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"estimate_nights.png", "estimate_nights.json", "estimate.json"} <= artifacts
    drop = verdict.check("performance.estimated_drop").value
    assert np.isclose(run.data.metrics["nightly-estimate.performance.estimated_drop"], drop)
