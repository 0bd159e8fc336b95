"""mlflow_log against a real embedded MLflow store (sqlite); the HTTP server is covered in tests/integration."""

import json

import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_log
from skewgate.common.errors import BackendError
from skewgate.common.verdict import Check, Verdict


@pytest.fixture
def tracking(tmp_path):
    return mlflow_log.connect(f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="digits")


def test_artifacts_live_beside_the_embedded_store(tracking, tmp_path):
    location = tracking.client.get_experiment(tracking.experiment_id).artifact_location
    assert location == (tmp_path / "artifacts").as_uri()


def test_steps_of_one_pipeline_run_share_a_parent(tracking):
    verdict = Verdict.from_checks("export", [Check("a", passed=True, value=0.25)], subject=None)
    for step in ("export", "promote"):
        with tracking.step_run(step, pipeline_run_id="job-1") as run:
            run.log_verdict(verdict)
    parent, verdicts = tracking.pipeline_verdicts(since_ms=0)
    assert set(verdicts) == {"export", "promote"}
    children = tracking.client.search_runs([tracking.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert len(children) == 2
    export = next(c for c in children if c.data.tags["skewgate.step"] == "export")
    assert export.data.metrics == {"export.a": 0.25}
    assert export.info.status == "FINISHED"


def test_a_step_that_raises_ends_its_run_failed(tracking):
    with pytest.raises(ZeroDivisionError), tracking.step_run("export", pipeline_run_id="job-2"):
        1 / 0  # noqa: B018
    runs = tracking.client.search_runs([tracking.experiment_id], "tags.`skewgate.step` = 'export'")
    assert runs[0].info.status == "FAILED"


def test_tensor_stats_table_is_logged(tracking):
    import numpy as np

    from skewgate.common.tensor_stats import summarize

    verdict = Verdict.from_checks("export", [Check("a", passed=True)], subject=None,
                                  stats=[summarize("x", "torch.input", np.ones((2, 3), np.float32))])
    with tracking.step_run("export", pipeline_run_id=None) as run:
        run.log_verdict(verdict)
    local = tracking.client.download_artifacts(run.run_id, "tensor_stats.json")
    with open(local) as handle:
        table = json.load(handle)
    assert "sha256" in table["columns"] and len(table["data"]) == 1


def test_registry_round_trip(tracking, tiny_onnx):
    with tracking.step_run("promote", pipeline_run_id="job-3") as run:
        registry = mlflow_log.MlflowRegistry(run)
        assert not registry.model_exists("digits")
        assert registry.find_version("digits", "abc") is None
        version = registry.register("digits", tiny_onnx, "abc")
        assert registry.find_version("digits", "abc") == version
        registry.set_tags("digits", version, {"skewgate.export.status": "pass"})
        assert registry.get_tags("digits", version)["skewgate.export.status"] == "pass"
        assert registry.get_alias("digits", "champion") is None
        registry.set_alias("digits", "champion", version)
        assert registry.get_alias("digits", "champion") == version == mlflow_log.alias_version(
            tracking, "digits", "champion")
        assert not registry.version_exists("digits", "99")
        registry.append_promotion_log("digits", {"n": 1})
        registry.append_promotion_log("digits", {"n": 2})
    client = MlflowClient(tracking.uri)
    source = client.get_model_version("digits", version).source
    assert source.endswith("/onnx")
    log_run = client.search_runs([tracking.experiment_id], "tags.`skewgate.kind` = 'promotion-log'")[0]
    path = client.download_artifacts(log_run.info.run_id, "promotions.jsonl")
    with open(path) as handle:
        assert [json.loads(line)["n"] for line in handle] == [1, 2]


def test_unreachable_server_gives_up_at_the_deadline():
    import time

    from skewgate.common.processes import free_port

    started = time.monotonic()
    with pytest.raises(BackendError, match="unreachable for 1s"):
        mlflow_log.connect(f"http://127.0.0.1:{free_port()}", experiment="x", deadline_s=1.0)
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("layout", ["bare-folder", "kfp-output-without-suffix", "mlflow-model"])
def test_fetch_registered_onnx_finds_the_file_by_its_evidence_digest(tracking, tmp_path, tiny_onnx, layout):
    from skewgate.common.errors import InputError
    from skewgate.common.io import sha256_file

    assert mlflow_log.fetch_registered_onnx(tracking, "digits", "champion", tmp_path / "none") is None
    folder = tmp_path / "upload"
    folder.mkdir()
    if layout == "mlflow-model":  # MLmodel + model.onnx, beside another .onnx that is not the judged one
        (folder / "MLmodel").write_text("flavors:\n  onnx:\n    data: model.onnx\n")
        (folder / "model.onnx").write_bytes(tiny_onnx.read_bytes())
        (folder / "decoy.onnx").write_bytes(b"not the model")
    else:
        (folder / ("onnx_model" if layout.startswith("kfp") else "tiny.onnx")).write_bytes(tiny_onnx.read_bytes())
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        run.tracking.client.log_artifacts(run.run_id, str(folder), "model")
        source = run.tracking.client.get_run(run.run_id).info.artifact_uri + "/model"
    client = tracking.client
    client.create_registered_model("digits")
    version = client.create_model_version("digits", source, tags={"skewgate.onnx_sha256": sha256_file(tiny_onnx)})
    client.set_registered_model_alias("digits", "champion", version.version)
    found = mlflow_log.fetch_registered_onnx(tracking, "digits", "champion", tmp_path / "download")
    assert found is not None and found.sha256 == sha256_file(tiny_onnx) and str(found.version) == "1"
    assert found.path.read_bytes() == tiny_onnx.read_bytes()
    client.set_model_version_tag("digits", "1", "skewgate.onnx_sha256", "0" * 64)
    with pytest.raises(InputError, match=r"expected a file with sha256 0000"):
        mlflow_log.fetch_registered_onnx(tracking, "digits", "champion", tmp_path / "again")
