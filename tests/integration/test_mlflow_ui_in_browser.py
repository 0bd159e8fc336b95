"""The MLflow UI as a person opens it, in headless Chromium against a real `mlflow server`: the link skewgate gives
opens the experiment's runs table (not the GenAI overview), and there the promoted and the blocked pipeline runs
stand apart by status."""

import pytest

from skewgate.common import mlflow_log
from skewgate.common.mlflow_log.tracking import log_night
from skewgate.common.verdict import Check, Subject, Verdict
from tests.support.browser import chromium, visible_text

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def experiment(mlflow_url):
    if chromium() is None:
        pytest.skip("needs chromium, from the Debian package (.ci/run installs it): apt-get install -y chromium")
    tracking = mlflow_log.connect(mlflow_url, experiment="ui-check")
    for job, passed in (("job-promoted", True), ("job-blocked", False)):
        with tracking.step_run("promote", pipeline_run_id=job) as run:
            run.log_verdict(Verdict.from_checks("promote", [Check("evidence.export", passed=passed)],
                                                subject=Subject(artifact="m.onnx", sha256="ab" * 32)))
        mlflow_log.finish_pipeline_run(tracking, job, pipeline="release-gate")
    log_night(tracking, Verdict.from_checks("nightly-drift", [Check("c", passed=True)], subject=None),
              {"drift.ks_max": 0.1}, run_ids=[])  # creates the experiment's drift-history run
    return tracking


def test_the_link_opens_the_runs_table_with_both_pipeline_runs(experiment, mlflow_url):
    link = mlflow_log.runs_table_link(mlflow_url, experiment.experiment_id)
    # parent runs are named after the candidate and the outcome
    href, text = visible_text(link, until=lambda _h, t: "m.onnx · promoted" in t and "m.onnx · blocked" in t)
    assert "/runs" in href and "overview" not in href
    assert "m.onnx · promoted" in text and "m.onnx · blocked" in text
    # the bookkeeping run is in the experiment, and the link's filter keeps it out of the candidates' table
    client = experiment.client
    assert [r.info.run_name for r in client.search_runs([experiment.experiment_id], "attributes.run_name = "
                                                        "'drift-history'")] == ["drift-history"]
    assert "drift-history" not in text
    tags = experiment.client.get_experiment(experiment.experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"


def test_without_the_workflow_switch_the_ui_lands_elsewhere(experiment, mlflow_url):
    """Why the link carries `workflowType`: MLflow 3.17's UI opens an experiment's bare address on the GenAI
    overview whatever the experiment's tag says. If a later MLflow honours the tag, this test says so."""
    href, _text = visible_text(f"{mlflow_url}/#/experiments/{experiment.experiment_id}",
                               until=lambda h, _t: "/overview" in h or "/runs" in h, timeout_s=60)
    assert "/overview" in href and "workflowType=genai" in href


def test_a_failed_step_runs_page_says_why_in_its_description(experiment, mlflow_url):
    """A red step run used to say "No description": the reason sat in `checks.json`, its detail column cut off."""
    client = experiment.client
    (blocked,) = [r for r in client.search_runs([experiment.experiment_id], "tags.`skewgate.step` = 'promote'")
                  if r.data.tags["skewgate.status"] == "fail"]
    page = f"{mlflow_url}/#/experiments/{experiment.experiment_id}/runs/{blocked.info.run_id}"
    _href, text = visible_text(page, until=lambda _h, t: "FAIL — failed: evidence.export" in t, timeout_s=60)
    assert "FAIL — failed: evidence.export" in text  # the description, rendered from its Markdown
    assert "No description" not in text
