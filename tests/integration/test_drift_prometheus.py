"""Drift figures reach Prometheus: a real `prometheus-pushgateway` and a real `prometheus` (Debian packages,
`.ci/run` installs them) on 127.0.0.1, the drift CLI pushing, and the series read back through Prometheus's
HTTP query API — the path the chart's alert rules and dashboard read."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from skewgate.cli import main
from skewgate.common.processes import answers, free_port, stop, wait_until_up
from tests.drift.conftest import make_frame

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("prometheus-pushgateway")),
                       reason="needs the Debian packages prometheus and prometheus-pushgateway (.ci/run installs "
                              "them)"),
]


@contextlib.contextmanager
def _server(command: list[str], health: str, log_path: Path) -> Iterator[None]:
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_up(process, lambda: answers(health), what=command[0], log_path=log_path, deadline_s=60)
            yield
        finally:
            stop(process)


@pytest.fixture
def prometheus(tmp_path) -> Iterator[tuple[str, str]]:
    """(pushgateway URL, prometheus URL): prometheus scrapes the gateway every second, keeping its labels."""
    gateway_port, prometheus_port = free_port(), free_port()
    gateway = f"http://127.0.0.1:{gateway_port}"
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "pushgateway", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{gateway_port}"]}]}],
    }))
    with _server(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{gateway_port}"],
                 f"{gateway}/-/healthy", tmp_path / "pushgateway.log"), _server(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            f"http://127.0.0.1:{prometheus_port}/-/ready", tmp_path / "prometheus.log"):
        yield gateway, f"http://127.0.0.1:{prometheus_port}"


@pytest.fixture
def write(tmp_path):
    def _write(name, frame):
        frame.to_parquet(tmp_path / f"{name}.parquet")
        return tmp_path / f"{name}.parquet"

    return _write


def _query(prometheus: str, promql: str, *, series: int = 1, until: float = 60.0) -> list[dict]:
    """Poll the query API until the expression returns `series` series (scrapes are every second)."""
    deadline = time.monotonic() + until
    while True:
        url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            result = json.loads(response.read())["data"]["result"]
        if len(result) >= series or time.monotonic() > deadline:
            return result
        time.sleep(1)


def test_nightly_figures_are_queryable_in_prometheus(prometheus, write, tmp_path):
    gateway, server = prometheus
    ref = write("ref", make_frame(1500, seed=1))
    for model, current, code in (("healthy-model", {}, 0), ("drifted-model", {"shift": 0.6}, 1)):
        cur = write(f"cur-{model}", make_frame(1500, seed=2, **current))
        assert main(["drift", "--reference", str(ref), "--current", str(cur), "--report", str(tmp_path / "d.json"),
                     "--pushgateway", gateway, "--pushgateway-model", model]) == code
        assert json.loads((tmp_path / "d.json").read_text())["details"]["pushgateway"] == f"pushed to {gateway}"

    status = _query(server, 'skewgate_drift_status == 1', series=2)  # a scrape after both pushes
    assert {(r["metric"]["model"], r["metric"]["status"]) for r in status} == {
        ("healthy-model", "pass"), ("drifted-model", "fail")}
    drifted = _query(server, 'skewgate_drift_feature_drifted{model="drifted-model"} == 1')
    assert [r["metric"]["feature"] for r in drifted] == ["f2"]
    statistic = _query(server, 'skewgate_drift_feature_statistic{model="drifted-model",feature="f2"}')
    assert float(statistic[0]["value"][1]) > 0.2 and statistic[0]["metric"]["test"] == "ks"
    pvalue = _query(server, 'skewgate_drift_mmd_pvalue{model="drifted-model"}')
    assert float(pvalue[0]["value"][1]) < 0.05
    assert _query(server, 'time() - skewgate_drift_last_run_timestamp_seconds < 600')


def test_an_unreachable_gateway_is_recorded_not_fatal(write, tmp_path):
    ref, cur = write("ref", make_frame(500, seed=1)), write("cur", make_frame(500, seed=2))
    gateway = f"http://127.0.0.1:{free_port()}"
    assert main(["drift", "--reference", str(ref), "--current", str(cur), "--report", str(tmp_path / "d.json"),
                 "--pushgateway", gateway]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["details"]["pushgateway"].startswith("not pushed:")
