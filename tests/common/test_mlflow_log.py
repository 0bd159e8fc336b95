"""mlflow_log against a real embedded MLflow store (sqlite); the HTTP server is covered in tests/integration."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.common import mlflow_conventions as conv
from skewgate.common import mlflow_log
from skewgate.common.errors import Inconsistent, InputError, Rejected, Unreachable
from skewgate.common.io import sha256_file
from skewgate.common.step_details import PromoteDetails
from skewgate.common.verdict import Check, Subject, Verdict
from tests.support.promotion_log import read_promotion_log


@pytest.fixture
def tracking(mlflow_db):
    return mlflow_log.connect(mlflow_db, experiment="digits")


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
    assert export.data.metrics == {"export.a": 0.25, "export.a.passed": 1.0}
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


@pytest.mark.parametrize("name", ["digits", "d'igits\" or name='x", "ziffern-ü «β»"],
                         ids=["plain", "quotes-in-name", "unicode"])
def test_registry_round_trip(tracking, tiny_onnx, name):
    sha = sha256_file(tiny_onnx)
    with tracking.step_run("promote", pipeline_run_id="job-3") as run:
        registry = mlflow_log.MlflowRegistry(run)
        assert not registry.model_exists(name)
        assert registry.find_version(name, sha) is None
        version = registry.register(name, tiny_onnx, sha)
        assert registry.find_version(name, sha) == version
        registry.set_tags(name, version, {"skewgate.export.status": "pass"})
        assert registry.get_tags(name, version)["skewgate.export.status"] == "pass"
        assert registry.get_alias(name, "champion") is None
        registry.set_alias(name, "champion", version)
        assert registry.get_alias(name, "champion") == version == mlflow_log.alias_version(
            tracking, name, "champion")
        assert not registry.version_exists(name, "99")
        registry.append_promotion_log(name, {"at": "2026-01-01T00:00:00.000+00:00", "n": 1})
        registry.append_promotion_log(name, {"at": "2026-01-01T00:00:01.000+00:00", "n": 2})
    assert [r["n"] for r in read_promotion_log(tracking)] == [1, 2]
    log_run = MlflowClient(tracking.uri).search_runs([tracking.experiment_id],
                                                      "tags.`skewgate.kind` = 'promotion-log'")[0]
    assert log_run.info.status == "FINISHED"


def test_a_promotion_log_run_created_in_a_race_loses_no_record(tracking):
    """Two promotions that both found no promotion-log run each create one; the one whose clock read earlier
    reaches the server later, after the other already wrote its record. Both records stay readable."""
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        mlflow_log.MlflowRegistry(run).append_promotion_log("digits", {"at": "2026-01-01T00:00:01.000+00:00", "n": 1})
    client = MlflowClient(tracking.uri)
    rival = client.create_run(tracking.experiment_id, run_name="promotion-log:digits", start_time=1,
                              tags={conv.PROMOTION_LOG_TAG: conv.PROMOTION_LOG_KIND})
    client.set_terminated(rival.info.run_id, status="FINISHED")
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        mlflow_log.MlflowRegistry(run).append_promotion_log("digits", {"at": "2026-01-01T00:00:02.000+00:00", "n": 2})
    assert [r["n"] for r in read_promotion_log(tracking)] == [1, 2]


def test_a_registered_version_is_an_mlflow_model_that_pyfunc_loads(tracking, tiny_onnx, tmp_path, monkeypatch):
    import mlflow.pyfunc
    import onnxruntime

    sha = sha256_file(tiny_onnx)
    example = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        registry = mlflow_log.MlflowRegistry(run, input_example=example)
        version = registry.register("digits", tiny_onnx, sha)
        registry.set_alias("digits", "champion", version)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", tracking.uri)  # not mlflow.set_registry_uri: that outlives the test
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking.uri)
    model = mlflow.pyfunc.load_model("models:/digits@champion")
    inputs = model.metadata.get_input_schema().inputs
    assert [(i.name, i.shape) for i in inputs] == [("x", (-1, 4))]
    sample = {"x": np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)}
    expected = onnxruntime.InferenceSession(str(tiny_onnx)).run(None, sample)[0]
    np.testing.assert_array_equal(np.asarray(model.predict(sample)["y"]), expected)
    local = mlflow.artifacts.download_artifacts("models:/digits@champion", dst_path=str(tmp_path / "m"))
    assert sha256_file(f"{local}/model.onnx") == sha  # the judged bytes, not a re-serialisation


def test_concurrent_registrations_of_one_file_keep_one_version(tracking, tiny_onnx):
    from concurrent.futures import ThreadPoolExecutor

    sha = sha256_file(tiny_onnx)

    def register(_):
        with tracking.step_run("promote", pipeline_run_id=None) as run:
            return mlflow_log.MlflowRegistry(run).register("digits", tiny_onnx, sha)

    with ThreadPoolExecutor(4) as pool:
        winners = set(pool.map(register, range(4)))
    versions = MlflowClient(tracking.uri).search_model_versions("name='digits'")
    assert len(versions) == 1 and winners == {str(versions[0].version)}


def test_unreachable_server_gives_up_at_the_deadline_naming_the_uri():
    import re
    import time

    from skewgate.common.processes import free_port

    uri = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(Unreachable, match=re.escape(f"MLflow at {uri} unreachable for 1s")):
        mlflow_log.connect(uri, experiment="x", deadline_s=1.0)
    assert time.monotonic() - started < 15


def test_a_logged_verdict_that_does_not_parse_stays_an_input_error(tracking, tmp_path):
    with tracking.step_run("export", pipeline_run_id="job-corrupt") as run:
        corrupt = tmp_path / "export.verdict.json"
        corrupt.write_text("{not json")
        tracking.client.log_artifact(run.run_id, str(corrupt))
    with pytest.raises(InputError, match=r"export\.verdict\.json: expected a verdict JSON file, found invalid JSON"):
        mlflow_log.finish_pipeline_run(tracking, "job-corrupt", pipeline="release-gate")


def test_a_refusal_is_rejected_naming_server_operation_and_code(tracking):
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        registry = mlflow_log.MlflowRegistry(run)
        with pytest.raises(Rejected, match=r"MLflow at sqlite:///.*: move alias 'champion' of 'absent' to v1 "
                                           r"failed: MlflowException") as caught:
            registry.set_alias("absent", "champion", "1")
    assert caught.value.code == "RESOURCE_DOES_NOT_EXIST"


class StoreThatLosesRuns:
    """The seam `Tracking.client`: an MLflow store that accepts a new run, yet never finds it again."""

    def search_runs(self, experiment_ids, filter_string, max_results=1000):
        return []

    def create_run(self, experiment_id, run_name, tags):
        return SimpleNamespace(info=SimpleNamespace(run_id="r-lost"))

    def set_terminated(self, run_id, status):
        pass


def test_a_created_run_that_a_search_cannot_find_is_inconsistent():
    tracking = mlflow_log.Tracking(uri="http://mlflow:5000", experiment_id="1", client=StoreThatLosesRuns())
    registry = mlflow_log.MlflowRegistry(mlflow_log.StepRun(tracking, "r-promote", "promote"))
    with pytest.raises(Inconsistent, match=r"MLflow at http://mlflow:5000: promotion-log run r-lost was created, "
                                           "yet a search for it finds none"):
        registry.append_promotion_log("digits", {"at": "2026-01-01T00:00:00.000+00:00"})


@pytest.mark.parametrize("layout", ["bare-folder", "kfp-output-without-suffix", "mlflow-model"])
def test_the_champion_is_read_downloaded_when_asked_and_its_file_found_by_its_evidence_digest(tracking, tmp_path,
                                                                                            tiny_onnx, layout):
    champions = mlflow_log.RegistryChampions.of(tracking)
    assert champions.fetch("digits", "champion", tmp_path / "none") is None
    folder = tmp_path / "upload"
    folder.mkdir()
    if layout == "mlflow-model":  # MLmodel + model.onnx, beside another .onnx that is not the judged one
        (folder / "MLmodel").write_text("flavors:\n  onnx:\n    data: model.onnx\n")
        (folder / "model.onnx").write_bytes(tiny_onnx.read_bytes())
        (folder / "decoy.onnx").write_bytes(b"not the model")
    else:
        (folder / ("onnx_model" if layout.startswith("kfp") else "tiny.onnx")).write_bytes(tiny_onnx.read_bytes())
    (tmp_path / "stored").mkdir()
    (tmp_path / "stored" / "promotion.intoto.jsonl").write_text("{}\n")
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        run.tracking.client.log_artifacts(run.run_id, str(folder), "model")
        run.tracking.client.log_artifacts(run.run_id, str(tmp_path / "stored"), "attestations/v1")
        artifacts = run.tracking.client.get_run(run.run_id).info.artifact_uri
    client = tracking.client
    client.create_registered_model("digits")
    version = client.create_model_version("digits", f"{artifacts}/model", tags={
        conv.ONNX_DIGEST_TAG: sha256_file(tiny_onnx), conv.ATTESTATION_URI_TAG: f"{artifacts}/attestations/v1"})
    client.set_registered_model_alias("digits", "champion", version.version)
    looked_up = champions.fetch("digits", "champion")
    assert looked_up is not None and (looked_up.version, looked_up.model_dir, looked_up.attestations_dir) == (
        "1", None, None)  # nothing downloaded unless asked
    assert looked_up.label == "digits@champion (version 1)" and looked_up.sha256 == sha256_file(tiny_onnx)
    found = champions.fetch("digits", "champion", tmp_path / "download", attestations=True)
    assert found is not None and found.model_dir is not None and found.attestations_dir is not None
    assert [p.name for p in found.attestations_dir.iterdir()] == ["promotion.intoto.jsonl"]
    path, digest = conv.find_by_digest(found.model_dir, found.tags, found.uri)
    assert digest == found.sha256 and path.read_bytes() == tiny_onnx.read_bytes()
    client.set_model_version_tag("digits", "1", conv.ONNX_DIGEST_TAG, "0" * 64)
    again = champions.fetch("digits", "champion", tmp_path / "again")
    assert again is not None and again.model_dir is not None and again.attestations_dir is None
    with pytest.raises(InputError, match=r"models:/digits/1: skewgate\.onnx_sha256: expected a file with sha256 0000"):
        conv.find_by_digest(again.model_dir, again.tags, again.uri)


def _promote_verdict(status, *, sha="c0ffee" * 10 + "c0ff"):
    details = PromoteDetails(model_name="m", version="3", alias="champion", promoted=status == "pass",
                             previous_alias_version=None, reason=f"reason for {status}", outcome_tags_written=True,
                             int8_version=None)
    return Verdict.from_checks("promote", [Check("evidence.export", passed=status == "pass")],
                               subject=Subject(artifact="m.onnx", sha256=sha), details=details)


def _parent(tracking, job):
    return tracking.client.get_run(tracking.find_parent_run(job))


@pytest.mark.parametrize(("status", "outcome", "run_status"), [
    ("pass", "promoted", "FINISHED"),
    ("fail", "blocked", "FAILED"),
], ids=["promoted-finishes", "blocked-fails"])
def test_pipeline_parent_run_ends_with_its_outcome(tracking, status, outcome, run_status):
    job = f"job-{status}"
    with tracking.step_run("export", pipeline_run_id=job) as run:
        run.log_verdict(Verdict.from_checks("export", [Check("a", passed=True)], subject=None))
    with tracking.step_run("promote", pipeline_run_id=job) as run:
        run.log_verdict(_promote_verdict(status))
    assert _parent(tracking, job).info.status == "RUNNING"  # until the exit handler ends it
    result = mlflow_log.finish_pipeline_run(tracking, job, pipeline="release-gate", final_state="SUCCEEDED")
    parent = _parent(tracking, job)
    assert result.label == outcome
    assert parent.info.status == run_status and parent.info.end_time
    assert parent.data.tags["skewgate.outcome"] == outcome
    assert parent.info.run_name == f"m.onnx · {outcome}"  # promote's subject: export named no candidate here
    assert parent.data.tags["skewgate.candidate_sha256"] == "c0ffee" * 10 + "c0ff"
    assert parent.data.tags["skewgate.reason"] == f"reason for {status}"
    assert parent.data.tags["skewgate.model_version"] == "3"
    assert parent.data.metrics["gate.promoted"] == float(status == "pass")
    assert parent.data.metrics["export.passed"] == 1.0


def test_a_run_whose_steps_logged_nothing_ends_failed_with_kfps_reason(tracking):
    with tracking.step_run("export", pipeline_run_id="job-err") as run:
        run.log_verdict(Verdict.error("export", "cannot read model.pt2"))
    mlflow_log.finish_pipeline_run(tracking, "job-err", pipeline="release-gate", final_state="FAILED",
                                   final_error="export-op failed")
    parent = _parent(tracking, "job-err")
    assert parent.info.status == "FAILED"
    assert parent.data.tags["skewgate.outcome"] == "error"
    assert "export: cannot read model.pt2" in parent.data.tags["skewgate.reason"]
    # no step reached MLflow at all: the exit handler still leaves a FAILED parent run naming KFP's state
    mlflow_log.finish_pipeline_run(tracking, "job-void", pipeline="release-gate", final_state="FAILED",
                                   final_error="importer failed")
    void = _parent(tracking, "job-void")
    assert void.info.status == "FAILED"
    assert void.info.run_name == "pipeline-job-void · error"  # no verdict named the candidate
    assert parent.info.run_name == "pipeline-job-err · error"
    assert "no promote verdict" in void.data.tags["skewgate.reason"]
    assert "importer failed" in void.data.tags["skewgate.reason"]


@pytest.mark.parametrize(("status", "run_status"), [("pass", "FINISHED"), ("fail", "FAILED")],
                         ids=["passing-step", "failing-step"])
def test_an_ad_hoc_cli_call_is_one_run_that_ends_with_its_step(tracking, status, run_status):
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        run.log_verdict(_promote_verdict(status))
    runs = tracking.client.search_runs([tracking.experiment_id], "")
    assert [r.info.run_id for r in runs] == [run.run_id]  # one invocation, one run (it used to be two)
    assert [r.info.status for r in runs] == [run_status]
    assert runs[0].data.tags["skewgate.outcome"] == status and runs[0].data.tags["skewgate.step"] == "promote"
    assert runs[0].info.run_name == f"m.onnx · {status}"
    assert "mlflow.parentRunId" not in runs[0].data.tags
    # the description is the step's, failed checks and all
    assert runs[0].data.tags["mlflow.note.content"] == conv.run_description(_promote_verdict(status))


def test_an_ad_hoc_step_that_raises_leaves_nothing_running(tracking):
    with pytest.raises(ZeroDivisionError), tracking.step_run("export", pipeline_run_id=None):
        1 / 0  # noqa: B018
    (run,) = tracking.client.search_runs([tracking.experiment_id], "")
    assert run.info.status == "FAILED"
    assert "ZeroDivisionError" in run.data.tags["skewgate.reason"]


def test_experiment_is_tagged_to_open_the_runs_table(tracking, tmp_path):
    tags = tracking.client.get_experiment(tracking.experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    # an experiment made before skewgate tagged it gets the tag on the next connect
    uri = tracking.uri
    older = MlflowClient(uri).create_experiment("made-elsewhere")
    mlflow_log.connect(uri, experiment="made-elsewhere")
    assert MlflowClient(uri).get_experiment(older).tags["mlflow.experimentKind"] == "custom_model_development"


def _nightly(status, date, ks):
    return Verdict.from_checks(
        "nightly-drift", [Check("ks_drift", passed=status == "pass", value=ks, limit=0)], subject=None,
        details={"run_date": date, "model_version": "1", "mmd": {"value": 0.01 * ks},
                 "features": [{"feature": "px_0", "statistic": 0.1 * ks, "pvalue": 0.5}]})


def test_nightly_statistics_chart_across_nights(tracking):
    nights = [("n1", "pass", "2026-11-30T02:00:00+00:00", 0), ("n2", "fail", "2026-12-01T02:00:00+00:00", 3)]
    for job, status, date, ks in nights:
        with tracking.step_run("nightly-drift", pipeline_run_id=job) as run:
            run.log_verdict(_nightly(status, date, ks))
        mlflow_log.finish_pipeline_run(tracking, job, pipeline="nightly-drift", final_state="SUCCEEDED")
    assert _parent(tracking, "n1").info.status == "FINISHED"
    assert _parent(tracking, "n2").data.tags["skewgate.outcome"] == "drift"
    history = tracking.client.search_runs([tracking.experiment_id], "tags.`skewgate.kind` = 'drift-history'")
    assert len(history) == 1 and history[0].info.status == "FINISHED"
    series = tracking.client.get_metric_history(history[0].info.run_id, "drift.feature.px_0.statistic")
    assert [(m.step, m.value) for m in series] == [(20787, 0.0), (20788, pytest.approx(0.3))]
    assert series[1].timestamp == 1796090400000  # the night's run date, not when it was logged
    assert [m.value for m in tracking.client.get_metric_history(history[0].info.run_id, "drift.ks_drift")] == [0, 3]


def test_a_nightly_estimate_charts_across_nights_beside_drift(tracking):
    def estimated(status, date, estimate, realised=None):
        row = {"metric": "accuracy", "reference": 0.9, "estimated": estimate, "low": estimate - 0.02,
               "high": estimate + 0.02, **({"realised": realised} if realised is not None else {})}
        return Verdict.from_checks("nightly-estimate", [Check("performance.estimated_drop", passed=status == "pass",
                                                              value=0.9 - estimate, limit=0.02)], subject=None,
                                   details={"run_date": date, "model_version": "1", "table": [row]})

    nights = [("e1", "2026-11-30T02:00:00+00:00", "pass", 0.89, None),
              ("e2", "2026-12-01T02:00:00+00:00", "fail", 0.80, None),
              ("e3", "2026-11-30T02:00:00+00:00", "pass", 0.89, 0.88)]  # the first night's labels arrived
    for job, date, status, estimate, realised in nights:
        with tracking.step_run("nightly-drift", pipeline_run_id=job) as run:
            run.log_verdict(_nightly("pass", date, 0))
        with tracking.step_run("nightly-estimate", pipeline_run_id=job) as run:
            run.log_verdict(estimated(status, date, estimate, realised))
        mlflow_log.finish_pipeline_run(tracking, job, pipeline="nightly-drift", final_state="SUCCEEDED")
    assert _parent(tracking, "e2").data.tags["skewgate.outcome"] == "degraded"
    history = tracking.client.search_runs([tracking.experiment_id], "tags.`skewgate.kind` = 'drift-history'")
    run_id = history[0].info.run_id
    series = tracking.client.get_metric_history(run_id, "estimate.accuracy")
    # the night re-run with its labels logs the same estimate at the same night: MLflow keeps it once
    assert sorted((m.step, m.value) for m in series) == [(20787, 0.89), (20788, 0.8)]
    assert [(m.step, m.value) for m in tracking.client.get_metric_history(run_id, "estimate.realised_accuracy")] \
        == [(20787, 0.88)]
    assert sorted(m.value for m in tracking.client.get_metric_history(run_id, "estimate.accuracy.low")) == \
        pytest.approx([0.78, 0.87])


@pytest.mark.parametrize(("status", "run_status"), [
    ("pass", "FINISHED"), ("warn", "FINISHED"), ("fail", "FAILED"), ("error", "FAILED"),
])
def test_a_step_run_ends_with_its_verdicts_status(tracking, status, run_status):
    """A failing step is red under its red parent, never FINISHED (green)."""
    if status == "error":
        verdict = Verdict.error("export", "could not read the model")
    else:
        verdict = Verdict.from_checks("export", [Check("a", passed=status == "pass",
                                                       severity="warn" if status == "warn" else "fail")],
                                      subject=None)
    with tracking.step_run("export", pipeline_run_id=f"job-{status}") as run:
        run.log_verdict(verdict)
    assert tracking.client.get_run(run.run_id).info.status == run_status


def test_the_parent_run_is_named_after_the_candidate_and_its_outcome(tracking):
    sha = "be" * 32
    export = Verdict.from_checks("export", [Check("a", passed=True)],
                                 subject=Subject(artifact="/work/kfp/out/onnx_model", sha256=sha,
                                                 source="/data/candidates/model.pt2", source_sha256="5a" * 32))
    for job, status in (("job-b", "fail"), ("job-p", "pass")):
        for step, verdict in (("export", export), ("promote", _promote_verdict(status))):
            with tracking.step_run(step, pipeline_run_id=job) as run:
                run.log_verdict(verdict)
        mlflow_log.finish_pipeline_run(tracking, job, pipeline="release-gate")
    assert _parent(tracking, "job-b").info.run_name == "model.pt2 · blocked"
    assert _parent(tracking, "job-p").info.run_name == "model.pt2 · promoted"
    steps = tracking.client.search_runs([tracking.experiment_id], "tags.`skewgate.step` = 'promote'")
    assert sorted(r.info.status for r in steps) == ["FAILED", "FINISHED"]


def test_checks_table_gives_a_severity_only_to_failing_rows(tracking, tmp_path):
    verdict = Verdict.from_checks("export", [Check("ok", passed=True, value=1.0, limit=2.0),
                                             Check("thin", passed=False, severity="warn"),
                                             Check("broken", passed=False)], subject=None)
    with tracking.step_run("export", pipeline_run_id="job-checks") as run:
        run.log_verdict(verdict)
    with open(tracking.client.download_artifacts(run.run_id, "checks.json", str(tmp_path))) as handle:
        table = json.load(handle)
    rows = {row[table["columns"].index("name")]: dict(zip(table["columns"], row, strict=True))
            for row in table["data"]}
    assert (rows["ok"]["result"], rows["ok"]["severity"]) == ("pass", "")
    assert (rows["thin"]["result"], rows["thin"]["severity"]) == ("warn", "warn")
    assert (rows["broken"]["result"], rows["broken"]["severity"]) == ("fail", "fail")


def test_inputs_are_logged_as_datasets_with_source_and_digest(tracking):
    sha, source_sha, data_sha = "ab" * 32, "cd" * 32, "ef" * 32
    verdict = Verdict.from_checks("parity", [Check("a", passed=True)], subject=Subject(
        artifact="/in/model.onnx", sha256=sha, source="/in/model.pt2", source_sha256=source_sha,
        data={"inputs": data_sha, "missing": ""}))
    with tracking.step_run("parity", pipeline_run_id="job-ds") as run:
        run.input_paths["inputs"] = "/in/eval.npz"
        run.log_verdict(verdict)
    inputs = tracking.client.get_run(run.run_id).inputs.dataset_inputs
    found = {i.dataset.name: (i.dataset, {t.key: t.value for t in i.tags}) for i in inputs}
    assert set(found) == {"model.onnx", "model.pt2", "eval.npz"}
    dataset, tags = found["eval.npz"]
    assert json.loads(dataset.source) == {"uri": "/in/eval.npz"} and dataset.source_type == "local"
    assert dataset.digest == data_sha[:12] and json.loads(dataset.profile) == {"sha256": data_sha}
    assert tags == {"mlflow.data.context": "inputs", "skewgate.sha256": data_sha}
    assert found["model.onnx"][1]["mlflow.data.context"] == "candidate"
    assert found["model.pt2"][1]["skewgate.sha256"] == source_sha


def test_settings_are_flattened_into_params_within_mlflows_limits():
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Limits:
        floor: float | None = None

    @dataclass(frozen=True)
    class Options:
        alias: str = "champion"
        tolerances: tuple[str, ...] = ("out=1e-3,1e-5",)
        limits: dict = field(default_factory=lambda: {"accuracy": Limits(0.9)})
        note: str = "x" * 7000
        triton_url: str = "http://user:hunter2@triton:8000"
        api_token: str = "s3cret"
        tracking_uri: str = "sqlite:///m.db"

    params = conv.params(Options())
    assert params["alias"] == "champion"
    assert params["tolerances"] == '["out=1e-3,1e-5"]'
    assert params["limits.accuracy.floor"] == "0.9"
    assert len(params["note"]) == conv.PARAM_VALUE_LIMIT and params["note"].endswith("…")
    assert params["triton_url"] == "http://***@triton:8000"
    assert "api_token" not in params and "tracking_uri" not in params


def test_step_settings_are_logged_as_params(tracking):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Options:
        max_samples: int = 64
        allow_pickle: bool = False

    with tracking.step_run("export", pipeline_run_id="job-params") as run:
        assert run.log_settings(Options()) == {"max_samples": "64", "allow_pickle": "false"}
    assert tracking.client.get_run(run.run_id).data.params == {"max_samples": "64", "allow_pickle": "false"}


@pytest.mark.parametrize("given, expected", [
    pytest.param(None, "true", id="unset-is-off"),
    pytest.param("false", "false", id="the-user-opted-in"),
])
def test_mlflow_telemetry_is_off_unless_the_user_opted_in(given, expected):
    """MLflow phones a public endpoint from every process that imports it; skewgate's processes (steps in a
    cluster, CI) must not, so importing the package that wraps mlflow turns it off before mlflow is imported."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"}
    if given is not None:
        env["MLFLOW_DISABLE_TELEMETRY"] = given
    code = ("import skewgate.common.mlflow_log, os, mlflow.telemetry.utils as t; "
            "print(os.environ['MLFLOW_DISABLE_TELEMETRY'], t.MLFLOW_DISABLE_TELEMETRY.get())")
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert found.stdout.split() == [expected, str(expected == "true")]


@pytest.mark.parametrize(("uri", "identity"), [
    pytest.param("sqlite:///{tmp}/m.db", "sqlite://{tmp}/m.db", id="sqlite"),
    pytest.param("sqlite:///{tmp}/sub/../m.db?timeout=5", "sqlite://{tmp}/m.db", id="sqlite-same-file-other-spelling"),
    pytest.param("https://user:secret@MLflow.Example.com:8443/prefix/", "https://mlflow.example.com:8443/prefix",
                 id="server-without-credentials"),
    pytest.param("http://127.0.0.1:5000", "http://127.0.0.1:5000", id="server"),
    pytest.param("databricks", "databricks", id="databricks"),
])
def test_a_registry_is_named_by_a_stable_identity(tmp_path, uri, identity):
    (tmp_path / "sub").mkdir()
    assert mlflow_log.registry_identity(uri.format(tmp=tmp_path)) == identity.format(tmp=tmp_path)


@pytest.mark.parametrize("uri", ["databricks", "http://127.0.0.1:5000", "postgresql://u@h/db", "sqlite:///:memory:"])
def test_only_local_stores_must_exist_before_a_step_opens_them(uri):
    assert mlflow_log.local_store(uri) is None
    mlflow_log.require_store(uri)  # nothing to check here: a server or database answers for itself


def test_a_local_store_that_does_not_exist_is_refused_and_not_created(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlfow.db'}"
    with pytest.raises(InputError, match=r"found no registry at .*mlfow\.db"):
        mlflow_log.connect(uri, experiment="x", deadline_s=1)
    assert not (tmp_path / "mlfow.db").exists()


@pytest.mark.parametrize("pointed", [
    pytest.param("/dev/zero", id="device"),
    pytest.param("file:///etc", id="a-folder-of-this-machine"),
    pytest.param("{artifacts}/model", id="not-an-attestations-folder"),
    pytest.param("{artifacts}/attestations/v1/../../../../..", id="climbing-out"),
    pytest.param("{other}/attestations/v1", id="another-store"),
])
def test_an_attestations_tag_pointing_outside_the_store_is_refused_unread(tracking, tmp_path, tiny_onnx, pointed):
    """#32 item 6: a tag anyone with registry write access can set must not make verify copy from anywhere."""
    folder = tmp_path / "upload"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(tiny_onnx.read_bytes())
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        run.tracking.client.log_artifacts(run.run_id, str(folder), "model")
        run.tracking.client.log_artifacts(run.run_id, str(folder), "attestations/v1")
        artifacts = run.tracking.client.get_run(run.run_id).info.artifact_uri
    other = f"file://{tmp_path}/elsewhere/1/{'0' * 32}/artifacts"
    client = tracking.client
    client.create_registered_model("digits")
    client.create_model_version("digits", f"{artifacts}/model", tags={
        conv.ONNX_DIGEST_TAG: sha256_file(tiny_onnx),
        conv.attestation_uri_tag("champion"): pointed.format(artifacts=artifacts, other=other)})
    client.set_registered_model_alias("digits", "champion", "1")
    found = mlflow_log.RegistryChampions.of(tracking).fetch("digits", "champion", tmp_path / "dl", attestations=True)
    assert found is not None and found.attestations_dir is None
    assert "not the attestations/v<N> folder of a run in" in found.attestations_refused
    assert not (tmp_path / "dl" / "attestations").exists()
    client.set_model_version_tag("digits", "1", conv.attestation_uri_tag("champion"), f"{artifacts}/attestations/v1")
    found = mlflow_log.RegistryChampions.of(tracking).fetch("digits", "champion", tmp_path / "ok", attestations=True)
    assert found is not None and found.attestations_dir is not None and not found.attestations_refused


@pytest.mark.parametrize(("age_s", "announced", "waited_for"), [
    pytest.param(5.0, False, True, id="just-started-not-yet-announced"),
    pytest.param(20.0, False, True, id="unannounced-inside-the-grace"),
    pytest.param(45.0, False, False, id="unannounced-past-the-grace"),
    pytest.param(3600.0, False, False, id="left-by-a-crash"),
    pytest.param(3600.0, True, True, id="announced-and-under-way"),
])
def test_a_promote_run_that_never_named_its_target_holds_no_promotion_past_the_grace(tracking, age_s, announced,
                                                                                   waited_for):
    """#32 item 7: a RUNNING promote run on another host (its process cannot be checked) that never announced a
    target was left by a crash: every later promotion of the model waited ~300 s for it."""
    import time as clock

    from skewgate.common.mlflow_log.registry import UNANNOUNCED_GRACE_S

    assert UNANNOUNCED_GRACE_S == 30.0
    tags = {"skewgate.step": "promote", conv.PROCESS_TAG: "another-host:4242:1"}
    if announced:
        tags[conv.PROMOTE_TARGET_TAG] = "digits@champion"
    orphan = tracking.client.create_run(tracking.experiment_id, start_time=int((clock.time() - age_s) * 1000),
                                        tags=tags)
    with tracking.step_run("promote", pipeline_run_id=None) as run:
        found = mlflow_log.MlflowRegistry(run).contenders("digits", "champion", "2")
    assert (orphan.info.run_id in found) == waited_for


@pytest.mark.parametrize("stage", ["connect", "a-call-after-it"])
def test_a_server_that_drips_ends_each_call_at_the_deadline(stage):
    """#32 item 7: a server that answers 200 then one byte a second held export and promote past 240 s (only a
    per-read timeout). Connecting, and every later call to a tracking server, ends within the deadline."""
    import time

    from tests.support.drip import DripServer

    server = DripServer(experiment="x" if stage == "a-call-after-it" else None)
    try:
        started = time.monotonic()
        if stage == "connect":
            with pytest.raises(Unreachable,
                               match=r"unreachable for 2s: .*connect: not done within the overall deadline of 2 s"):
                mlflow_log.connect(server.url, experiment="x", deadline_s=2.0)
        else:
            tracking = mlflow_log.connect(server.url, experiment="x", deadline_s=2.0)
            assert tracking.call_deadline_s == 2.0
            with pytest.raises(Unreachable, match=r"find the parent run of job-1 not done within 2 s"), \
                    tracking.step_run("export", pipeline_run_id="job-1"):
                pass
        # the body would take 28 hours; the margin is for a busy machine, far from "minutes"
        assert time.monotonic() - started < 30
    finally:
        server.close()


def test_a_local_store_has_no_call_deadline(tracking):
    assert tracking.call_deadline_s is None  # a file cannot drip; a slow disk under load must not fail a step
