"""`pipeline schedule` against a fake KFP API: no cluster is reachable from here (docs/design.md: cluster section)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from skewgate.common.errors import InputError, Rejected, Unreachable
from skewgate.pipelines.cli import load_pipeline
from skewgate.pipelines.schedule import Schedule, check_cron, schedule


class FakeKfp:
    """Records what a KFP API server would be asked; knows pipelines and recurring runs by name."""

    def __init__(self, *, pipelines=(), recurring=(), down=False):
        self.pipelines = {name: f"p-{name}" for name in pipelines}
        self.recurring = [SimpleNamespace(display_name=n, recurring_run_id=f"r-{n}") for n in recurring]
        self.calls, self.down = [], down

    def _record(self, *call):
        if self.down:
            raise ConnectionError("connection refused")
        self.calls.append(call)

    def get_pipeline_id(self, name):
        self._record("get_pipeline_id", name)
        return self.pipelines.get(name)

    def upload_pipeline(self, path, pipeline_name, description):
        self._record("upload_pipeline", pipeline_name, yaml.safe_load(Path(path).read_text())["pipelineInfo"]["name"])
        self.pipelines[pipeline_name] = f"p-{pipeline_name}"
        return SimpleNamespace(pipeline_id=f"p-{pipeline_name}")

    def upload_pipeline_version(self, path, pipeline_version_name, pipeline_id):
        self._record("upload_pipeline_version", pipeline_id)
        return SimpleNamespace(pipeline_version_id=f"v-{pipeline_id}")

    def create_experiment(self, name, namespace=None):
        self._record("create_experiment", name, namespace)
        return SimpleNamespace(experiment_id="e-1")

    def list_recurring_runs(self, experiment_id, page_size):
        self._record("list_recurring_runs", experiment_id)
        return SimpleNamespace(recurring_runs=self.recurring)

    def delete_recurring_run(self, recurring_run_id):
        self._record("delete_recurring_run", recurring_run_id)

    def create_recurring_run(self, **kwargs):
        self._record("create_recurring_run", kwargs)
        return SimpleNamespace(recurring_run_id="r-new")


PLAN = Schedule(cron="0 0 2 * * *", params={"serving_snapshot": "s3://logs/today.parquet",
                                            "model_name": "digits-cnn", "mlflow_tracking_uri": "http://mlflow"})
ALL = {name: load_pipeline(name) for name in ("release-gate", "nightly-drift")}  # what `schedule` uploads


def test_first_install_uploads_both_pipelines_and_schedules_the_nightly_run():
    client = FakeKfp()
    assert schedule(client, PLAN, pipelines=ALL) == "r-new"
    uploads = {c[1]: c[2] for c in client.calls if c[0] == "upload_pipeline"}
    assert uploads == {"skewgate-release-gate": "skewgate-release-gate",
                       "skewgate-nightly-drift": "skewgate-nightly-drift"}
    [(_, run)] = [c for c in client.calls if c[0] == "create_recurring_run"]
    assert run["cron_expression"] == "0 0 2 * * *"
    assert run["max_concurrency"] == 1 and run["no_catchup"] is True and run["enabled"] is True
    assert run["pipeline_id"] == "p-skewgate-nightly-drift" and run["version_id"] == "v-p-skewgate-nightly-drift"
    assert run["params"]["serving_snapshot"] == "s3://logs/today.parquet"


def test_upgrade_adds_versions_and_replaces_the_recurring_run():
    client = FakeKfp(pipelines=["skewgate-release-gate", "skewgate-nightly-drift"],
                     recurring=["skewgate-nightly-drift", "someone-elses-run"])
    schedule(client, PLAN, pipelines=ALL)
    assert not [c for c in client.calls if c[0] == "upload_pipeline"]
    assert sum(c[0] == "upload_pipeline_version" for c in client.calls) == 2
    assert [c[1] for c in client.calls if c[0] == "delete_recurring_run"] == ["r-skewgate-nightly-drift"]


def test_upload_only_creates_no_recurring_run():
    client = FakeKfp()
    assert schedule(client, Schedule(cron="0 0 2 * * *", params={}, recurring=False), pipelines=ALL) is None
    assert not [c for c in client.calls if c[0] in {"create_recurring_run", "create_experiment"}]


@pytest.mark.parametrize("cron", ["0 2 * * *", "daily", "0 0 2 * * * *"], ids=["5-fields", "word", "7-fields"])
def test_cron_must_have_six_fields(cron):
    with pytest.raises(InputError, match="expected 6 fields"):
        check_cron(cron)


def test_unreachable_api_is_unreachable_naming_the_call():
    with pytest.raises(Unreachable, match="KFP API: look up pipeline 'skewgate-"):
        schedule(FakeKfp(down=True), PLAN, pipelines=ALL)


class ApiException(Exception):
    """kfp_server_api's refusal: an HTTP status and reason."""

    def __init__(self, status, reason):
        super().__init__(f"({status}) Reason: {reason}")
        self.status, self.reason = status, reason


class RefusingKfp(FakeKfp):
    def create_recurring_run(self, **kwargs):
        raise ApiException(403, "Forbidden")


def test_a_refusal_is_rejected_with_the_http_status():
    with pytest.raises(Rejected, match=r"KFP API: create recurring run failed: ApiException: \(403\)") as caught:
        schedule(RefusingKfp(), PLAN, pipelines=ALL)
    assert caught.value.code == "403"


def test_cli_unreachable_host_exits_2_naming_it(capsys):
    from skewgate.cli import main
    from skewgate.common.processes import free_port

    host = f"http://127.0.0.1:{free_port()}"
    assert main(["pipeline", "schedule", "--host", host]) == 2
    assert f"skewgate pipeline schedule: KFP API at {host}: connect failed" in capsys.readouterr().err


def test_cli_bad_cron_exits_2(capsys):
    from skewgate.cli import main

    assert main(["pipeline", "schedule", "--host", "http://127.0.0.1:9", "--cron", "0 2 * * *"]) == 2
    assert "expected 6 fields" in capsys.readouterr().err


def test_the_fanout_nightly_can_be_the_recurring_run_and_replaces_the_single_one():
    client = FakeKfp(recurring=["skewgate-nightly-drift"])
    plan = Schedule(cron=PLAN.cron, params=PLAN.params, nightly="nightly-drift-fanout")
    pipelines = {name: load_pipeline(name) for name in ("release-gate", "nightly-drift-fanout")}
    assert schedule(client, plan, pipelines=pipelines) == "r-new"
    uploads = {c[1]: c[2] for c in client.calls if c[0] == "upload_pipeline"}
    assert uploads == {"skewgate-release-gate": "skewgate-release-gate",
                       "skewgate-nightly-drift-fanout": "skewgate-nightly-drift-fanout"}
    [(_, run)] = [c for c in client.calls if c[0] == "create_recurring_run"]
    assert run["pipeline_id"] == "p-skewgate-nightly-drift-fanout"
    assert run["job_name"] == "skewgate-nightly-drift"  # one nightly run, whichever pipeline it runs
    assert [c[1] for c in client.calls if c[0] == "delete_recurring_run"] == ["r-skewgate-nightly-drift"]


@pytest.mark.parametrize("which", ["nightly-drift", "nightly-drift-fanout"])
def test_cli_schedule_accepts_either_nightly_pipeline(monkeypatch, capsys, which):
    from skewgate.cli import main
    from skewgate.pipelines import cli

    client = FakeKfp()
    monkeypatch.setattr(cli, "_client", lambda host: client)
    monkeypatch.setenv("SKEWGATE_SIGNING_SECRET", "skewgate-signing-key")
    assert main(["pipeline", "schedule", "--host", "http://kfp", "--pipeline", which,
                 "--param", "serving_snapshot=s3://logs/", "--param", "model_name=digits-cnn"]) == 0
    assert capsys.readouterr().out.strip() == "r-new"
    uploaded = {c[1] for c in client.calls if c[0] == "upload_pipeline"}
    assert uploaded == {"skewgate-release-gate", f"skewgate-{which}"}
    [(_, run)] = [c for c in client.calls if c[0] == "create_recurring_run"]
    assert run["pipeline_id"] == f"p-skewgate-{which}"


def test_cli_schedule_refuses_a_pipeline_that_is_not_a_nightly(capsys):
    from skewgate.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["pipeline", "schedule", "--host", "http://kfp", "--pipeline", "release-gate"])
    assert exited.value.code == 2
    assert "nightly-drift-fanout" in capsys.readouterr().err
