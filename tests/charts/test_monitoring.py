"""The drift alert rules and the Grafana dashboard in the chart: opt-in, valid, and about the pushed series; the
rules' behaviour over nights of pushes checked by the real `promtool test rules` (Debian package `prometheus`)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from skewgate.common.verdict import STATUSES
from tests.charts.test_chart import NIGHTLY, kinds, render

PACKAGE = Path(__file__).resolve().parents[2] / "components" / "skewgate"
ALERTING = (PACKAGE / "drift" / "outputs" / "alerting.py", PACKAGE / "estimate" / "nightly" / "alerting.py")
STALE_AFTER_HOURS = 30
MONITORED = {**NIGHTLY, "nightlyDrift": {**NIGHTLY["nightlyDrift"], "pushgatewayUrl": "http://pushgateway.monitoring:9091"},
             "monitoring": {"enabled": True, "staleAfterHours": STALE_AFTER_HOURS}}
ALERTS = ("SkewgateDriftFailed", "SkewgateDriftWarning", "SkewgateDriftStale", "SkewgateEstimatedAccuracyDrop",
          "SkewgateEstimateStale")
JOB, MODEL = "skewgate_nightly_drift", "fraud"
ESTIMATE_JOB = "skewgate_nightly_estimate"

needs_promtool = pytest.mark.skipif(not shutil.which("promtool"), reason="needs promtool, from the Debian package "
                                                                          "prometheus (.ci/run installs it)")


def _pushed_series() -> set[str]:
    return {m for path in ALERTING for m in re.findall(r'"(skewgate_(?:drift|estimate)[a-z_]+)"', path.read_text())}


def _rules_text() -> str:
    return kinds(render(MONITORED))["ConfigMap/skewgate-drift-alerts"]["data"]["drift-alerts.yaml"]


def _rules(text: str) -> list[dict]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def test_monitoring_is_opt_in_and_renders_rules_and_a_dashboard():
    assert not any(k.startswith("ConfigMap/skewgate-drift") for k in kinds(render({})))
    docs = kinds(render(MONITORED))
    rules = _rules(docs["ConfigMap/skewgate-drift-alerts"]["data"]["drift-alerts.yaml"])
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert set(alerts) == set(ALERTS)
    assert not any("for" in r for r in alerts.values())  # a step pushed once a night: `for:` counts nights wrong
    assert "108000" in alerts["SkewgateDriftStale"]["expr"]  # 30 h
    assert "[30h]" in alerts["SkewgateDriftWarning"]["expr"]  # the previous run is looked for within the same 30 h
    assert "{{ $labels.model }}" in alerts["SkewgateDriftFailed"]["annotations"]["summary"]
    dashboard_map = docs["ConfigMap/skewgate-drift-dashboard"]
    assert dashboard_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(dashboard_map["data"]["skewgate-drift.json"])
    series = r"(?<![:\w])skewgate_(?:drift|estimate)[a-z_]+"
    queried = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(series, t["expr"])}
    queried |= {m for r in rules for m in re.findall(series, r["expr"])}
    assert {"skewgate_estimated_accuracy_low", "skewgate_estimate_status"} <= queried
    assert queried and queried <= _pushed_series()  # nothing reads a series the run does not push
    recorded = {r["record"] for r in rules if "record" in r}
    assert all(re.fullmatch(r"job_model:skewgate_drift_[a-z_]+:[a-z_]+", name) for name in recorded)
    assert {m for r in rules for m in re.findall(r"job_model:[a-z_]+:[a-z_]+", r["expr"])} <= recorded
    assert {s for r in rules for s in re.findall(r'status="(\w+)"', r["expr"])} <= set(STATUSES)
    job = docs["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]
    assert "--param=pushgateway_url=$(PUSHGATEWAY_URL)" in job["args"]
    assert docs["ConfigMap/skewgate-gates"]["data"]["PUSHGATEWAY_URL"] == "http://pushgateway.monitoring:9091"


def test_no_pushgateway_no_parameter():
    job = kinds(render(NIGHTLY))["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]
    assert not any("pushgateway" in a for a in job["args"])


# --- the rules over nights of pushes -------------------------------------------------------------------------------
# Prometheus scrapes the Pushgateway (here every 5 minutes), which keeps a model's latest push: each night's run
# (hour 24·n) replaces the figures, a missed night (None) leaves the previous night's figures standing.
SCRAPES_PER_NIGHT = 24 * 12


def _steps(values: list[str]) -> str:
    """One value per night → promtool's expanding notation, one sample every 5 minutes (`_` = no sample yet)."""
    return " ".join(f"_x{SCRAPES_PER_NIGHT}" if v == "_" else f"{v}+0x{SCRAPES_PER_NIGHT - 1}" for v in values)


def _input_series(nights: list[str | None], *, series: bool = False) -> list[dict]:
    """The pushed series over `nights`; `series`: each run was judged over a series of nights (the nightly run),
    so it also pushed `skewgate_drift_series_threshold`."""
    status: str | None = None
    pushed: str = "_"
    statuses, stamps = [], []
    for night, outcome in enumerate([*nights, None]):  # and a day after the last night
        if outcome is not None:
            status, pushed = outcome, str(night * 24 * 3600)
        statuses.append(status)
        stamps.append(pushed)
    labels = f'job="{JOB}", model="{MODEL}"'
    pushed_series = [{"series": f"skewgate_drift_last_run_timestamp_seconds{{{labels}}}", "values": _steps(stamps)}]
    for value in STATUSES:
        pushed_series.append({"series": f'skewgate_drift_status{{{labels}, status="{value}"}}',
                              "values": _steps(["_" if s is None else str(int(s == value)) for s in statuses])})
    if series:
        pushed_series.append({"series": f"skewgate_drift_series_threshold{{{labels}}}",
                              "values": _steps(["_" if s is None else "25" for s in statuses])})
    return pushed_series


def _expected(rules: list[dict], firing: set[str], *, job: str = JOB) -> list[dict]:
    """An `alert_rule_test` entry per alert: the alerts in `firing` with their labels and annotations (pushed by
    `job`), the others silent."""
    out = []
    for rule in rules:
        if "alert" not in rule:
            continue
        alerts = []
        if rule["alert"] in firing:
            labels = {**rule["labels"], "job": job, "model": MODEL}
            if rule["alert"] in ("SkewgateDriftFailed", "SkewgateEstimatedAccuracyDrop"):
                labels["status"] = "fail"
            annotations = {k: v.replace("{{ $labels.model }}", MODEL) for k, v in rule["annotations"].items()}
            alerts.append({"exp_labels": labels, "exp_annotations": annotations})
        out.append({"alertname": rule["alert"], "exp_alerts": alerts})
    return out


def _estimate_series(nights: list[str | None]) -> list[dict]:
    """What the nightly estimate pushes over `nights`: drift's status and timestamp series under estimate's names
    and job."""
    return [{"series": s["series"].replace("skewgate_drift_", "skewgate_estimate_").replace(JOB, ESTIMATE_JOB),
             "values": s["values"]} for s in _input_series(nights)]


def _promtool(tmp_path: Path, rules_text: str, nights: list[str | None],
              checks: dict[int, set[str]], *, series: bool = False, estimate: bool = False
              ) -> subprocess.CompletedProcess:
    """`promtool test rules` over `nights` (of drift, or with `estimate` of the nightly estimate), asserting at
    each hour in `checks` exactly the alerts named there."""
    (tmp_path / "rules.yaml").write_text(rules_text)
    rules = _rules(rules_text)
    pushed = _estimate_series(nights) if estimate else _input_series(nights, series=series)
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "5m", "tests": [{
        "interval": "5m", "input_series": pushed,
        "alert_rule_test": [{"eval_time": f"{hour}h", **entry} for hour, firing in checks.items()
                            for entry in _expected(rules, firing, job=ESTIMATE_JOB if estimate else JOB)]}]}
    (tmp_path / "test.yaml").write_text(json.dumps(test, indent=1))  # JSON is YAML
    return subprocess.run(["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


WARNING, STALE, FAILED = "SkewgateDriftWarning", "SkewgateDriftStale", "SkewgateDriftFailed"
CASES = {
    # nights (runs at hours 0, 24, 48, …) → {hour: the alerts firing then}
    "two warned nights fire the warning": (
        ["pass", "warn", "warn"], {47: set(), 48: {WARNING}, 60: {WARNING}, 71: {WARNING}}),
    "one warned night does not": (["pass", "pass", "warn"], {48: set(), 60: set(), 71: set()}),
    "two warned nights with a pass between them do not": (["warn", "pass", "warn"], {48: set(), 50: set(), 71: set()}),
    "a missed night fires staleness": (["pass", None], {29: set(), 31: {STALE}, 47: {STALE}}),
    "a pass after warnings clears the warning": (["warn", "warn", "pass"], {47: {WARNING}, 48: set(), 71: set()}),
    "a fail after warnings is the failure, not the warning": (
        ["warn", "warn", "fail"], {47: {WARNING}, 48: {FAILED}, 71: {FAILED}}),
    "a missed night after two warnings hands the warning over to staleness": (
        ["warn", "warn", None], {47: {WARNING}, 53: {WARNING}, 55: {STALE}}),
    "a third warned night keeps warning": (["warn", "warn", "warn"], {47: {WARNING}, 48: {WARNING}, 71: {WARNING}}),
}
# Runs judged over a series of nights (the nightly run): tonight's warnings never page, the series' alarm does
SERIES_CASES = {
    "warned nights over a series do not warn": (["warn", "warn", "warn"], {47: set(), 48: set(), 71: set()}),
    "the series' alarm is the failure": (["warn", "pass", "fail"], {47: set(), 48: {FAILED}, 71: {FAILED}}),
    "a missed night over a series fires staleness": (["warn", "warn", None], {47: set(), 55: {STALE}}),
}


@needs_promtool
def test_the_rendered_rules_pass_promtool_check(tmp_path):
    (tmp_path / "rules.yaml").write_text(_rules_text())
    result = subprocess.run(["promtool", "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize("case", CASES)
def test_alert_rules_over_nights_of_pushes(tmp_path, case):
    nights, checks = CASES[case]
    result = _promtool(tmp_path, _rules_text(), nights, checks)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize("case", SERIES_CASES)
def test_alert_rules_over_nights_judged_by_a_series(tmp_path, case):
    nights, checks = SERIES_CASES[case]
    result = _promtool(tmp_path, _rules_text(), nights, checks, series=True)
    assert result.returncode == 0, result.stdout + result.stderr


DROP, ESTIMATE_STALE = "SkewgateEstimatedAccuracyDrop", "SkewgateEstimateStale"
ESTIMATE_CASES = {
    "a failed estimate pages that night": (["pass", "fail"], {23: set(), 24: {DROP}, 47: {DROP}}),
    "a warned estimate (the interval straddles the line) does not": (["pass", "warn"], {24: set(), 47: set()}),
    "the next passing night clears it": (["fail", "pass"], {23: {DROP}, 24: set()}),
    "a missed night fires staleness": (["pass", None], {29: set(), 31: {ESTIMATE_STALE}}),
}


@needs_promtool
@pytest.mark.parametrize("case", ESTIMATE_CASES)
def test_estimate_alert_rules_over_nights_of_pushes(tmp_path, case):
    nights, checks = ESTIMATE_CASES[case]
    result = _promtool(tmp_path, _rules_text(), nights, checks, estimate=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_estimate_job_is_the_one_the_pushes_name():
    from skewgate.estimate.nightly.alerting import JOB as PUSHED

    assert PUSHED == ESTIMATE_JOB


@needs_promtool
def test_promtool_catches_the_old_for_2d_rule(tmp_path):
    """The check can fail: `for: 2d` on the nightly status (the old rule) stays silent through two warned nights."""
    rules = yaml.safe_load(_rules_text())
    for rule in rules["groups"][0]["rules"]:
        if rule.get("alert") == WARNING:
            rule.update(expr='skewgate_drift_status{status="warn"} == 1', **{"for": "2d"})
    nights, checks = CASES["two warned nights fire the warning"]
    result = _promtool(tmp_path, yaml.safe_dump(rules), nights, checks)
    assert result.returncode == 1
    assert "SkewgateDriftWarning" in result.stdout + result.stderr
