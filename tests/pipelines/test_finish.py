"""`skewgate pipeline finish`: steps run as CLIs under one --pipeline-run-id end their parent run like a pipeline."""

import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common import mlflow_log
from skewgate.common.verdict import Check, Subject, Verdict


@pytest.mark.parametrize(("passed", "code", "status", "outcome"), [
    (True, 0, "FINISHED", "promoted"), (False, 1, "FAILED", "blocked"),
], ids=["promoted-exits-0", "blocked-exits-1"])
def test_finish_ends_the_parent_run(mlflow_db, capsys, passed, code, status, outcome):
    uri = mlflow_db
    tracking = mlflow_log.connect(uri, experiment="digits")
    verdict = Verdict.from_checks("promote", [Check("evidence.export", passed=passed)],
                                  subject=Subject(artifact="m.onnx", sha256="be" * 32))
    with tracking.step_run("promote", pipeline_run_id="scripted-1") as run:
        run.log_verdict(verdict)
    args = ["pipeline", "finish", "--pipeline-run-id", "scripted-1", "--experiment", "digits", "--tracking-uri", uri]
    assert main(args) == code
    assert capsys.readouterr().out.lstrip().startswith(f"{outcome}: ")
    parent = MlflowClient(uri).get_run(tracking.find_parent_run("scripted-1"))
    assert parent.info.status == status
    assert parent.data.tags["skewgate.outcome"] == outcome
    assert parent.info.run_name == f"m.onnx · {outcome}"  # the candidate and its outcome, not `pipeline-<id>`
    step = MlflowClient(uri).get_run(run.run_id)
    assert step.info.status == status  # a blocked promote is red under its red parent, a promoted one green


def test_finish_without_a_tracking_uri_exits_2(capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["pipeline", "finish", "--pipeline-run-id", "x", "--experiment", "digits"]) == 2
    assert "--tracking-uri" in capsys.readouterr().err
