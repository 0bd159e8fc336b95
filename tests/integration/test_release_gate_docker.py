"""The release gate end to end in the component image: kfp.local.DockerRunner (host networking), a real
`mlflow server` on 127.0.0.1, Triton started inside the probe's and parity's containers. `make e2e-docker`
builds the image, then runs this module (`-m docker`)."""

import subprocess

import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_log
from skewgate.common.images import IMAGE
from skewgate.demo.digits import train_and_save
from skewgate.pipelines.local import run_locally
from skewgate.pipelines.release_gate import release_gate
from tests.integration.conftest import signing_keys

pytestmark = [pytest.mark.integration, pytest.mark.docker]
NAME = "digits-cnn-docker"
STEPS = {"export", "calibrate", "drift", "parity", "probe", "compare", "promote"}


@pytest.fixture(scope="module")
def runs(mlflow_url, tmp_path_factory):
    found = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True)
    assert found.returncode == 0, f"image {IMAGE} not built: run `make images` ({found.stderr.strip()})"
    root = tmp_path_factory.mktemp("kfp-docker")
    data = train_and_save(root / "data", epochs=5)  # under the pipeline root: the only folder kfp mounts
    tracking = mlflow_log.connect(mlflow_url, experiment=NAME)
    public_key = signing_keys(tmp_path_factory.mktemp("keys"))
    outcome = {}
    for label in ("good", "defective"):
        arguments = {"candidate_model": str(getattr(data, label)), "eval_data": str(data.examples),
                     "calibration_data": str(data.calibration), "reference_data": str(data.reference),
                     "current_data": str(data.current), "model_name": NAME, "mlflow_tracking_uri": mlflow_url,
                     "trusted_public_keys": public_key}
        run = run_locally(release_gate, arguments, pipeline_root=root, log_file=root / "kfp.log", runner="docker")
        parent, verdicts = tracking.pipeline_verdicts(since_ms=run.started_ms)
        outcome[label] = (run, parent, verdicts)
    outcome["log"] = (root / "kfp.log").read_text(encoding="utf-8", errors="replace")
    return outcome


def test_good_candidate_is_promoted_from_the_containers(runs, mlflow_url):
    run, _parent, verdicts = runs["good"]
    assert {step: v.status for step, v in verdicts.items()} == dict.fromkeys(STEPS, "pass")
    assert run.succeeded and run.output == "promoted"
    version = MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion")
    assert version.version == verdicts["promote"].details["version"]
    assert version.tags["skewgate.onnx_sha256"] == verdicts["export"].subject.sha256


def test_defective_candidate_is_blocked_and_the_champion_stays(runs, mlflow_url):
    run, _parent, verdicts = runs["defective"]
    statuses = {step: v.status for step, v in verdicts.items()}
    assert statuses["export"] == "fail" and statuses["parity"] == "fail" and statuses["promote"] == "fail"
    # kfp.local's DockerRunner can report a container that failed and was auto-removed as a success, so the
    # run's own state is not evidence here; the pipeline's output (promote's status) is
    assert run.output in {None, "blocked"}
    good = runs["good"][2]["promote"].details["version"]
    assert MlflowClient(mlflow_url).get_model_version_by_alias(NAME, "champion").version == good


def test_every_step_ran_in_the_image_and_left_its_verdict_in_mlflow(runs, mlflow_url):
    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name(NAME).experiment_id
    for label in ("good", "defective"):
        children = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{runs[label][1]}'")
        assert {c.data.tags["skewgate.step"] for c in children} == STEPS
    assert f"Found image {IMAGE!r}" in runs["log"]  # kfp.local ran the tasks in the image, not in this Python
