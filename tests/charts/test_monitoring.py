"""The drift alert rules and the Grafana dashboard in the chart: opt-in, valid, and about the pushed series."""

import json
import re
from pathlib import Path

import yaml

from skewgate.common.verdict import STATUSES
from tests.charts.test_chart import NIGHTLY, kinds, render

ALERTING = Path(__file__).resolve().parents[2] / "components" / "drift" / "outputs" / "alerting.py"


def _pushed_series() -> set[str]:
    return set(re.findall(r'"(skewgate_drift_[a-z_]+)"', ALERTING.read_text()))


def test_monitoring_is_opt_in_and_renders_rules_and_a_dashboard():
    assert not any(k.startswith("ConfigMap/skewgate-drift") for k in kinds(render({})))
    docs = kinds(render({**NIGHTLY, "nightlyDrift": {**NIGHTLY["nightlyDrift"], "pushgatewayUrl":
                                                     "http://pushgateway.monitoring:9091"},
                         "monitoring": {"enabled": True, "staleAfterHours": 30}}))
    rules = yaml.safe_load(docs["ConfigMap/skewgate-drift-alerts"]["data"]["drift-alerts.yaml"])
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert set(alerts) == {"SkewgateDriftFailed", "SkewgateDriftWarning", "SkewgateDriftStale"}
    assert "108000" in alerts["SkewgateDriftStale"]["expr"]  # 30 h
    assert "{{ $labels.model }}" in alerts["SkewgateDriftFailed"]["annotations"]["summary"]
    dashboard_map = docs["ConfigMap/skewgate-drift-dashboard"]
    assert dashboard_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(dashboard_map["data"]["skewgate-drift.json"])
    queried = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"skewgate_drift_[a-z_]+",
                                                                                       t["expr"])}
    queried |= {m for r in alerts.values() for m in re.findall(r"skewgate_drift_[a-z_]+", r["expr"])}
    assert queried and queried <= _pushed_series()  # nothing reads a series the run does not push
    assert {s for r in alerts.values() for s in re.findall(r'status="(\w+)"', r["expr"])} <= set(STATUSES)
    job = docs["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]
    assert "--param=pushgateway_url=$(PUSHGATEWAY_URL)" in job["args"]
    assert docs["ConfigMap/skewgate-gates"]["data"]["PUSHGATEWAY_URL"] == "http://pushgateway.monitoring:9091"


def test_no_pushgateway_no_parameter():
    job = kinds(render(NIGHTLY))["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]
    assert not any("pushgateway" in a for a in job["args"])
