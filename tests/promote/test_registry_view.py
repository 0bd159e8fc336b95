"""The registry as a person sees it after a promotion, against a real `mlflow server`: a handful of tags per
version, the per-step evidence as a Markdown table in the version's description, a description of the registered
model written once (never over one someone wrote), and links into the MLflow UI that open the run pages."""

import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common import mlflow_conventions as conv
from skewgate.common.cli_support import write_report
from skewgate.common.io import sha256_file
from skewgate.common.recording import StepResult
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.drift.core import DriftOptions
from skewgate.export.run import ExportOptions
from tests.support.browser import chromium, visible_text
from tests.support.mlflow_server import mlflow_server

PROFILE = {"skewgate.drift.profile_uri": "mlflow-artifacts:/1/abc/artifacts/profile/reference.profile",
           "skewgate.drift.profile_sha256": "ab" * 32}
CALIBRATE_TAGS = {"skewgate.calibrate.excluded_nodes": "none", "skewgate.calibrate.accuracy_drop": "0.0010",
                  "skewgate.calibrate.int8_mac_share": "0.9800", "skewgate.calibrate.int8_sha256": "cd" * 32}


def test_a_version_carries_a_handful_of_tags():
    assert conv.MAX_VERSION_TAGS <= 8  # digest, attestations, outcome and reason, two profiles' URI and digest


def test_the_key_figure_is_the_failed_check_else_the_one_closest_to_its_limit():
    failing = Verdict.from_checks("parity", [Check("ok", passed=True, value=0.1, limit=1.0),
                                             Check("max_abs", passed=False, value=0.25, limit=0.01),
                                             Check("other", passed=False, detail="broken")], subject=None)
    assert conv.key_figure(failing) == "max_abs: 0.25 (at most 0.01) (+1 more failed)"
    passing = Verdict.from_checks("drift", [Check("flag", passed=True, value=1.0, limit=1.0),
                                            Check("far", passed=True, value=0.001, limit=0.05),
                                            Check("near", passed=True, value=0.04, limit=0.05)], subject=None)
    assert conv.key_figure(passing) == "all 3 checks passed; closest to its limit: near: 0.04 (at most 0.05)"
    # a p-value passes above its limit: shown as the floor it is, not as a limit it exceeds
    p_value = Verdict.from_checks("drift", [Check("mmd_drift", passed=True, value=0.8209, limit=0.05)], subject=None)
    assert conv.key_figure(p_value) == "all 1 checks passed; closest to its limit: mmd_drift: 0.8209 (at least 0.05)"
    low = Verdict.from_checks("drift", [Check("mmd_drift", passed=False, value=0.001, limit=0.05)], subject=None)
    assert conv.key_figure(low) == "mmd_drift: 0.001 (at least 0.05)"
    assert conv.key_figure(Verdict.from_checks("x", [Check("c", passed=True)], subject=None)) == "all 1 checks passed"


def test_run_links_are_the_ui_hash_routes_in_the_model_training_view():
    link = conv.run_link("3", "f" * 32)
    assert link == f"#/experiments/3/runs/{'f' * 32}?workflowType=machine_learning"



@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow-registry-view")) as url:
        yield url


@pytest.fixture
def promote(tmp_path, tiny_onnx, keys, server, monkeypatch):
    """promote(name, export_passes=True) → exit code: export, drift and calibrate verdicts about one file,
    signed, promoted under `name` with export and drift required (calibrate's verdict is not judged, so its tags
    are not the version's)."""
    monkeypatch.setenv("SKEWGATE_TRUSTED_KEYS", str(keys[1]))
    onnx_path = tmp_path / "model.onnx"
    onnx_path.write_bytes(tiny_onnx.read_bytes())
    subject = Subject("model.onnx", sha256_file(onnx_path))

    def run(name, *, export_passes=True):
        verdicts = tmp_path / f"verdicts-{name}-{export_passes}"
        verdicts.mkdir()
        export = Verdict.from_checks("export", [Check("batch_invariance", passed=True, value=1e-7, limit=1e-5),
                                                Check("lint.batchnorm_eval_mode", passed=export_passes,
                                                      detail="BatchNorm traced in training mode: features.1")],
                                     subject=subject).judged_with(ExportOptions())
        drift = Verdict.from_checks("drift", [Check("ks_drift", passed=True, value=0.4, limit=0.05)],
                                    subject=subject, registry_tags=PROFILE).judged_with(DriftOptions())
        calibrate = Verdict.from_checks("calibrate", [Check("accuracy_drop", passed=True, value=0.001, limit=0.01)],
                                        subject=subject, registry_tags=CALIBRATE_TAGS)
        for verdict in (export, drift, calibrate):
            write_report(StepResult.unrecorded(verdict, str(keys[0])), verdicts / f"{verdict.step}.json")
        return main(["promote", "--model-name", name, "--onnx", str(onnx_path), "--verdicts", str(verdicts),
                     "--tracking-uri", server, "--experiment", name, "--require", "export,drift",
                     "--trusted-key", str(keys[1])])

    return run


@pytest.mark.integration
def test_a_promoted_version_has_a_handful_of_tags_and_the_evidence_table(promote, server):
    assert promote("view") == 0
    client = MlflowClient(server)
    version = client.get_model_version_by_alias("view", "champion")
    assert len(version.tags) <= 6
    assert set(version.tags) == {conv.ONNX_DIGEST_TAG, conv.attestation_uri_tag("champion"),
                                 *conv.promotion_tags("champion"), *PROFILE}
    assert {k: version.tags[k] for k in PROFILE} == PROFILE  # what the nightly drift run reads back
    assert version.tags["skewgate.promotion.champion.status"] == "promoted"
    text = version.description
    first, *rest = text.splitlines()
    # the versions table shows the first line as it is: plain words, no Markdown
    digest = version.tags[conv.ONNX_DIGEST_TAG]
    assert first == f"skewgate: promoted. 2 of 2 required steps passed for sha256 {digest[:12]}."
    assert not set(first) & set("*_`[]#|")
    assert "| step | status | key figure | verdict sha256 |" in rest
    rows = {line.split(" | ")[0].strip("| "): line for line in rest if line.startswith("| ") and "---" not in line}
    assert set(rows) == {"step", "export", "drift", "calibrate"}
    assert rows["export"].startswith("| export | pass | all 2 checks passed; closest to its limit: batch")
    assert "accuracy" in rows["calibrate"] and "| pass |" in rows["drift"]
    promote_run = client.get_run(version.run_id)
    # an ad-hoc CLI call is one run: the "pipeline run" it links is the promote run itself, linked once
    assert "mlflow.parentRunId" not in promote_run.data.tags
    assert text.count(f"]({conv.run_link(promote_run.info.experiment_id, version.run_id)})") == 1
    model = client.get_registered_model("view")
    assert model.description.startswith("Promoted by skewgate: ")
    assert "`champion`" in model.description and conv.ONNX_DIGEST_TAG in model.description


@pytest.mark.integration
def test_a_refused_version_says_why_in_its_description_and_tags(promote, server):
    assert promote("refused-view", export_passes=False) == 1
    version = MlflowClient(server).get_model_version("refused-view", "1")
    assert len(version.tags) <= 6 and version.tags["skewgate.promotion.champion.status"] == "refused"
    assert version.description.startswith("skewgate: refused. 1 of 2 required steps passed")
    assert "| export | fail | lint\\.batchnorm\\_eval\\_mode: BatchNorm traced in training mode: features\\.1 |" \
        in version.description
    assert "Refused because:" in version.description


@pytest.mark.integration
def test_a_registered_model_description_someone_wrote_is_kept(promote, server):
    client = MlflowClient(server)
    client.create_registered_model("described", description="Owned by the fraud team.")
    assert promote("described") == 0
    assert client.get_registered_model("described").description == "Owned by the fraud team."
    assert client.get_model_version("described", "1").description.startswith("skewgate: promoted.")


@pytest.mark.integration
def test_the_version_page_shows_the_table_and_its_link_opens_the_run(promote, server):
    """In Chromium against the MLflow UI: the version page renders the evidence table, and the description's
    link to the pipeline run opens that run's page in the model-training view, not the GenAI overview."""
    if chromium() is None:
        pytest.skip("needs chromium, from the Debian package (`make test` installs it as root): "
                    "apt-get install -y chromium")
    assert promote("browsed") == 0
    client = MlflowClient(server)
    version = client.get_model_version("browsed", "1")
    _href, text = visible_text(f"{server}/#/models/browsed/versions/1",
                               until=lambda _h, t: "key figure" in t, timeout_s=60)
    assert "skewgate: promoted. 2 of 2 required steps passed" in text and "key figure" in text
    assert "**" not in text and "| step |" not in text  # rendered, not shown as Markdown source
    promote_run = client.get_run(version.run_id)
    parent = client.get_run(promote_run.data.tags.get("mlflow.parentRunId", version.run_id))  # ad hoc: itself
    link = conv.run_link(promote_run.info.experiment_id, parent.info.run_id)
    href, text = visible_text(f"{server}/{link}", until=lambda _h, t: parent.info.run_name in t, timeout_s=60)
    assert f"/runs/{parent.info.run_id}" in href and "workflowType=genai" not in href
    assert parent.info.run_name in text


@pytest.mark.integration
def test_the_versions_table_says_a_refused_version_was_refused(promote, server):
    """In Chromium: MLflow's green READY tick is its registration status, which no client sets (README,
    Troubleshooting); the versions table beside it shows the start of the description, which says refused, and
    the outcome tag."""
    if chromium() is None:
        pytest.skip("needs chromium, from the Debian package (`make test` installs it as root): "
                    "apt-get install -y chromium")
    assert promote("refused-table", export_passes=False) == 1
    _href, text = visible_text(f"{server}/#/models/refused-table", until=lambda _h, t: "skewgate:" in t,
                               timeout_s=60)
    # the column cuts the description at about 30 characters: the outcome leads, so it stays in sight
    assert "skewgate: refused." in text and "skewgate: promoted" not in text
    assert "skewgate.promotion.champion.status\n: refused" in text
