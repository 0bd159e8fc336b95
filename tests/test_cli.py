"""The `skewgate` console entry as a user runs it, in its own process: it leaves without interpreter teardown
(`skewgate.cli.leave`), so everything it writes must be complete and the exit code exact."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.common.cli_support import check_tracking_uri
from skewgate.common.errors import InputError

M = "tests.preprocess.preprocessing_fns"


def test_the_process_exits_with_the_gate_code_after_writing_report_stdout_and_mlflow(tmp_path, mlflow_db):
    np.savez(tmp_path / "raw.npz", images=np.arange(24.0).reshape(6, 4))
    uri = mlflow_db
    done = subprocess.run([sys.executable, "-m", "skewgate", "preprocess", "--train", f"{M}:train", "--serve",
                           f"{M}:serve_unscaled", "--raw", str(tmp_path / "raw.npz"), "--report",
                           str(tmp_path / "r.json"), "--tracking-uri", uri, "--experiment", "exit"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # the gate failed: serving forgot to scale
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "fail"
    assert "preprocess: FAIL" in done.stderr
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("exit").experiment_id])
    # one call, one run: ended, and FAILED as the gate
    assert [r.info.status for r in runs] == ["FAILED"]
    assert any(a.path.endswith(".json") for r in runs for a in client.list_artifacts(r.info.run_id))


def test_usage_errors_still_exit_2():
    done = subprocess.run([sys.executable, "-m", "skewgate", "preprocess"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "required" in done.stderr


def test_leaving_stops_idle_thread_pools_and_waits_for_working_threads(tmp_path):
    """An idle pool worker (KFP local, MLflow use them) must not hang the exit; a thread still writing finishes."""
    marker = tmp_path / "written"
    script = f"""
import threading, time
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(2)
pool.submit(lambda: 1).result()  # the worker now waits for more work
def late():
    time.sleep(0.5)
    open({str(marker)!r}, "w").write("done")
threading.Thread(target=late).start()
from skewgate.cli import leave
leave(3)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert marker.read_text() == "done"


def _skewgate(*args, env=None):
    return subprocess.run([sys.executable, "-m", "skewgate", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def _env_without_tracking():
    import os

    return {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}


def test_no_command_prints_usage_to_stderr_and_exits_2():
    done = _skewgate()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: skewgate") and "no COMMAND given: one of export, " in done.stderr


@pytest.mark.parametrize(("uri", "found"), [
    ("{tmp}/mlflow.db", "found a bare path '{tmp}/mlflow.db'; write sqlite:///{tmp}/mlflow.db"),
    ("sqlite://tmp/x.db", "found 'sqlite://tmp/x.db' with 2 slashes after 'sqlite:'; write sqlite:///tmp/x.db for"),
])
def test_a_tracking_uri_mlflow_would_misread_exits_2_in_one_line_before_anything_runs(tmp_path, uri, found):
    """Once a 60-line traceback from inside MLflow and exit 1; nothing is evaluated, nothing is written."""
    uri, found = uri.format(tmp=tmp_path), found.format(tmp=tmp_path)
    done = _skewgate("preprocess", "--train", f"{M}:train", "--serve", f"{M}:serve_unscaled", "--raw",
                     str(tmp_path / "raw.npz"), "--report", str(tmp_path / "r.json"), "--tracking-uri", uri,
                     env=_env_without_tracking())
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"skewgate preprocess: --tracking-uri: expected a URI such as "
                           f"sqlite:////abs/path/mlflow.db, {found}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no report, no store (a bare path is no store)


def test_verbose_adds_the_traceback_to_the_one_line(tmp_path):
    done = _skewgate("preprocess", "--train", f"{M}:train", "--serve", f"{M}:serve_unscaled", "--raw",
                     str(tmp_path / "raw.npz"), "--tracking-uri", str(tmp_path / "mlflow.db"), "-v",
                     env=_env_without_tracking())
    assert done.returncode == 2
    assert "Traceback" in done.stderr and done.stderr.splitlines()[-1].startswith("skewgate preprocess: --tracking-uri")


@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/m.db", "sqlite:///{tmp}/m.db?timeout=5", "http://127.0.0.1:5000",
                                 "https://mlflow.example", "databricks", "postgresql+psycopg2://u@h/db", ""])
def test_tracking_uris_mlflow_reads_as_meant_pass_unchanged(tmp_path, uri):
    (tmp_path / "m.db").touch()
    assert check_tracking_uri(uri.format(tmp=tmp_path)) == uri.format(tmp=tmp_path)


@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/mlfow.db", "sqlite:///{tmp}/new/mlflow.db"],
                         ids=["typo", "no-folder"])
def test_a_store_that_does_not_exist_is_refused_and_not_created(tmp_path, uri):
    """MLflow would make an empty store there, and compare would find no champion in it: "first promotion"."""
    (tmp_path / "mlflow.db").touch()
    uri = uri.format(tmp=tmp_path)
    with pytest.raises(InputError, match=re.escape(f"mlflow db upgrade {uri}`), found no registry at ")):
        check_tracking_uri(uri)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


@pytest.mark.parametrize(("uri", "found"), [
    ("mlflow.db", "a bare path 'mlflow.db'; write sqlite:///mlflow.db"),
    ("sqlite:/m.db", "'sqlite:/m.db' with 1 slash after 'sqlite:'"),
    ("sqlite://", "an in-memory store"),
    ("localhost:5000", "'localhost:5000' without a scheme; write http://localhost:5000"),
    ("htp://localhost:5000", "did you mean http:?"),
    ("http://", "without a host"),
])
def test_tracking_uris_mlflow_would_misread_are_input_errors(uri, found, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(InputError, match=re.escape(found)):
        check_tracking_uri(uri)


def test_the_file_store_is_taken_only_where_mlflow_takes_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(InputError, match="MLFLOW_ALLOW_FILE_STORE=true"):
        check_tracking_uri(tmp_path.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert check_tracking_uri(tmp_path.as_uri()) == tmp_path.as_uri()
    with pytest.raises(InputError, match="no registry at"):
        check_tracking_uri((tmp_path / "nowhere").as_uri())


def test_a_uri_from_the_environment_is_named_as_such(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "/srv/mlflow.db")
    with pytest.raises(InputError, match=re.escape("--tracking-uri (from $MLFLOW_TRACKING_URI): expected")):
        check_tracking_uri("/srv/mlflow.db")
