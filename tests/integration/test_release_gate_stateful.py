"""The release gate for a stateful model, run by kfp.local against a real `mlflow server` and a real tritonserver:
a GRU sequence classifier that learned its initial state, evaluated on whole sequences and served step by step.
Its faithful STEP model from its learned initial state is promoted and registered beside as `<name>-step`; the
same STEP started from zeros (no initial state given) is blocked by parity's stream checks."""

import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_log
from skewgate.pipelines.local import run_locally
from skewgate.pipelines.release_gate import release_gate
from tests.integration.conftest import signing_keys
from tests.parity.stream_models import STEPS, build_release

pytestmark = pytest.mark.integration
NAME = "gru-it"


@pytest.fixture(scope="module")
def runs(mlflow_url, tmp_path_factory):
    """STEP from zeros first (blocked), then from the learned initial state (promoted)."""
    files = build_release(tmp_path_factory.mktemp("gru"))
    root = tmp_path_factory.mktemp("kfp")
    public_key = signing_keys(tmp_path_factory.mktemp("keys"))
    tracking = mlflow_log.connect(mlflow_url, experiment=NAME)
    arguments = {"candidate_model": str(files["pt2"]), "eval_data": str(files["eval"]),
                 "calibration_data": str(files["calibration"]), "reference_data": str(files["reference"]),
                 "current_data": str(files["current"]), "model_name": NAME, "mlflow_tracking_uri": mlflow_url,
                 "trusted_public_keys": public_key, "stream_model": str(files["step"]), "stream_states": "h=h_next"}
    outcome = {}
    for label, extra in (("zeros", {}), ("initial", {"stream_initial_state": str(files["h0"])})):
        run = run_locally(release_gate, arguments | extra, pipeline_root=root, log_file=root / "kfp.log")
        outcome[label] = (run, tracking.pipeline_verdicts(since_ms=run.started_ms)[1])
    return outcome, files


def test_step_from_zeros_where_the_model_learned_its_initial_state_is_blocked(runs, mlflow_url):
    (run, verdicts), _files = runs[0]["zeros"], runs[1]
    assert not run.succeeded
    assert verdicts["parity"].status == "fail"
    # FULL returns the last step's logits only: that is where the divergence is seen
    assert f"first at step {STEPS - 1}" in verdicts["parity"].check("stream.matches_batch").detail
    assert verdicts["promote"].status == "fail" and "stream.matches_batch" in verdicts["promote"].message
    # the probe served STEP under the sequence batcher, and judged that file
    assert verdicts["probe"].check("config.sequence_batching").passed
    assert verdicts["probe"].subject.sha256 == verdicts["parity"].subject.data["stream_onnx"]


def test_the_faithful_step_from_its_initial_state_is_promoted_and_registered_beside(runs, mlflow_url):
    from skewgate.common.io import sha256_file

    (run, verdicts), files = runs[0]["initial"], runs[1]
    assert run.succeeded and run.output == "promoted", {s: v.message for s, v in verdicts.items()}
    assert {s: v.status for s, v in verdicts.items()} == {
        "export": "pass", "calibrate": "pass", "drift": "pass", "parity": "pass", "probe": "pass",
        "compare": "pass", "promote": "pass"}
    assert {c.name for c in verdicts["probe"].checks} >= {"stream.sequences_match", "stream.isolation",
                                                          "stream.reset"}
    client = MlflowClient(mlflow_url)
    full = client.get_model_version_by_alias(NAME, "champion")
    step = client.get_model_version_by_alias(f"{NAME}-step", "champion")
    assert step.tags["skewgate.onnx_sha256"] == sha256_file(files["step"])
    assert step.tags["skewgate.fp32.version"] == full.version
    assert verdicts["promote"].details["step_version"] == step.version
