"""The `skewgate` console entry as a user runs it, in its own process: it leaves without interpreter teardown
(`skewgate.cli.leave`), so everything it writes must be complete and the exit code exact."""

import json
import subprocess
import sys

import numpy as np
from mlflow import MlflowClient

M = "tests.preprocess.preprocessing_fns"


def test_the_process_exits_with_the_gate_code_after_writing_report_stdout_and_mlflow(tmp_path):
    np.savez(tmp_path / "raw.npz", images=np.arange(24.0).reshape(6, 4))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-m", "skewgate", "preprocess", "--train", f"{M}:train", "--serve",
                           f"{M}:serve_unscaled", "--raw", str(tmp_path / "raw.npz"), "--report",
                           str(tmp_path / "r.json"), "--tracking-uri", uri, "--experiment", "exit"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # the gate failed: serving forgot to scale
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "fail"
    assert "preprocess: FAIL" in done.stderr
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("exit").experiment_id])
    # every run ended: the step run FINISHED (it evaluated), the call's parent run FAILED (the gate failed)
    assert sorted(r.info.status for r in runs) == ["FAILED", "FINISHED"]
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
