"""What the drift step pushes to a Prometheus Pushgateway: a fake gateway on 127.0.0.1 records each request, and
the body is read back with prometheus-client's own parser — the series names, labels and values the chart's
alert rules and dashboard read, the grouping that replaces a model's previous push, and the two errors."""

import http.server
import math
import socket
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from skewgate.common.errors import Rejected, Unreachable
from skewgate.common.processes import free_port
from skewgate.common.verdict import Check, Verdict
from skewgate.drift.outputs.alerting import JOB, MAX_FEATURES, push_drift_metrics


class Gateway:
    """A Pushgateway stand-in: records (method, path, body); answers `status`."""

    def __init__(self):
        self.requests: list[tuple[str, str, str]] = []
        self.status = 200
        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):  # the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                gateway.requests.append(("PUT", self.path, body))
                self.send_response(gateway.status)
                self.end_headers()

            do_POST = do_PUT  # recorded too: a POST would add to the group, not replace it

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def series(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The last push, parsed: (sample name, sorted labels) → value."""
        (_, _, body) = self.requests[-1]
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(body) for s in family.samples}


@pytest.fixture
def gateway():
    fake = Gateway()
    thread = threading.Thread(target=fake.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def verdict(status="pass", **details):
    if status == "error":
        return Verdict(step="drift", status="error", checks=(), subject=None, message="could not read", versions={})
    check = {"pass": Check("mmd", passed=True), "warn": Check("coverage", passed=False, severity="warn"),
             "fail": Check("mmd", passed=False)}[status]
    return Verdict.from_checks("drift", [check], subject=None, versions={}, details=details)


def row(feature, *, test="ks", statistic=0.2, adjusted_pvalue=0.01, effect=0.2, drifted=True):
    return {"feature": feature, "test": test, "statistic": statistic, "adjusted_pvalue": adjusted_pvalue,
            "effect": effect, "drifted": drifted}


def value(series, name, **labels):
    return series[name, tuple(sorted(labels.items()))]


DETAILS = {"mmd": {"value": 0.031, "pvalue": 0.002}, "ks_error_bound": 0.004}


def test_one_put_replaces_the_models_group_under_the_job(gateway):
    push_drift_metrics(verdict(**DETAILS), [row("age")], gateway=gateway.url, model="churn")
    [(method, path, _)] = gateway.requests
    assert (method, path) == ("PUT", f"/metrics/job/{JOB}/model/churn")  # PUT: the whole group is replaced


def test_the_job_can_be_named(gateway):
    push_drift_metrics(verdict(**DETAILS), [], gateway=gateway.url, model="churn", job="adhoc_drift")
    assert gateway.requests[0][1] == "/metrics/job/adhoc_drift/model/churn"


def test_a_model_name_with_a_slash_stays_one_grouping_label(gateway):
    push_drift_metrics(verdict(**DETAILS), [], gateway=gateway.url, model="team/churn")
    path = gateway.requests[0][1]
    assert path.startswith(f"/metrics/job/{JOB}/model@base64/") and path.count("/") == 5


@pytest.mark.parametrize("status", ["pass", "warn", "fail", "error"])
def test_the_status_series_is_one_for_the_verdicts_status_and_zero_for_the_others(gateway, status):
    push_drift_metrics(verdict(status), [], gateway=gateway.url, model="m")
    series = gateway.series()
    assert {s: value(series, "skewgate_drift_status", status=s) for s in ("pass", "warn", "fail", "error")} == {
        s: 1.0 if s == status else 0.0 for s in ("pass", "warn", "fail", "error")}


def test_the_verdicts_figures_are_pushed_as_they_are(gateway):
    features = [row("age"), row("city", test="chi2", drifted=False), row("income", drifted=True)]
    push_drift_metrics(verdict("fail", **DETAILS), features, gateway=gateway.url, model="m")
    series = gateway.series()
    assert value(series, "skewgate_drift_mmd") == 0.031
    assert value(series, "skewgate_drift_mmd_pvalue") == 0.002
    assert value(series, "skewgate_drift_ks_error_bound") == 0.004
    assert value(series, "skewgate_drift_features_drifted") == 2


def test_each_feature_has_its_four_series_labelled_by_feature_and_test(gateway):
    features = [row("age", statistic=0.31, adjusted_pvalue=1e-6, effect=0.29),
                row("city", test="chi2", statistic=12.5, adjusted_pvalue=0.4, effect=0.05, drifted=False)]
    push_drift_metrics(verdict(**DETAILS), features, gateway=gateway.url, model="m")
    series = gateway.series()
    age, city = {"feature": "age", "test": "ks"}, {"feature": "city", "test": "chi2"}
    assert [value(series, f"skewgate_drift_feature_{k}", **age) for k in ("statistic", "pvalue", "effect",
                                                                             "drifted")] == [0.31, 1e-6, 0.29, 1.0]
    assert [value(series, f"skewgate_drift_feature_{k}", **city) for k in ("statistic", "pvalue", "effect",
                                                                              "drifted")] == [12.5, 0.4, 0.05, 0.0]


def test_a_feature_that_was_not_testable_pushes_nan_not_zero(gateway):
    """A missing figure must not read as "no drift" (statistic 0, p-value 0) on a dashboard."""
    features = [{"feature": "empty", "test": "ks", "statistic": None, "adjusted_pvalue": None, "effect": 0.0}]
    push_drift_metrics(verdict(**DETAILS), features, gateway=gateway.url, model="m")
    series = gateway.series()
    labels = {"feature": "empty", "test": "ks"}
    assert math.isnan(value(series, "skewgate_drift_feature_statistic", **labels))
    assert math.isnan(value(series, "skewgate_drift_feature_pvalue", **labels))
    assert math.isnan(value(series, "skewgate_drift_feature_drifted", **labels))  # absent, not "no"
    assert value(series, "skewgate_drift_feature_effect", **labels) == 0.0
    assert value(series, "skewgate_drift_features_drifted") == 0


def test_feature_names_are_pushed_as_labels_whatever_they_hold(gateway):
    name = 'price "usd"\\per\nunit'
    push_drift_metrics(verdict(**DETAILS), [row(name), row(7, test="chi2")], gateway=gateway.url, model="m")
    series = gateway.series()
    assert value(series, "skewgate_drift_feature_drifted", feature=name, test="ks") == 1.0
    assert value(series, "skewgate_drift_feature_drifted", feature="7", test="chi2") == 1.0


def test_at_most_max_features_are_pushed_each_but_all_are_counted(gateway):
    features = [row(f"f{i:03d}") for i in range(MAX_FEATURES + 5)]
    push_drift_metrics(verdict(**DETAILS), features, gateway=gateway.url, model="m")
    series = gateway.series()
    pushed = {dict(labels)["feature"] for name, labels in series if name == "skewgate_drift_feature_statistic"}
    assert pushed == {f"f{i:03d}" for i in range(MAX_FEATURES)}  # the first ones: the table is most drifted first
    assert value(series, "skewgate_drift_features_drifted") == MAX_FEATURES + 5


def test_features_may_be_any_sequence_even_a_tuple(gateway):
    push_drift_metrics(verdict(**DETAILS), (row("a"), row("b")), gateway=gateway.url, model="m")
    assert value(gateway.series(), "skewgate_drift_features_drifted") == 2


def test_missing_figures_take_the_values_that_raise_no_alert(gateway):
    push_drift_metrics(verdict("error"), [], gateway=gateway.url, model="m")
    series = gateway.series()
    assert value(series, "skewgate_drift_mmd") == 0.0
    assert value(series, "skewgate_drift_mmd_pvalue") == 1.0
    assert value(series, "skewgate_drift_ks_error_bound") == 0.0
    assert value(series, "skewgate_drift_features_drifted") == 0
    assert not any(name.startswith("skewgate_drift_feature_") for name, _ in series)


def test_an_mmd_without_a_pvalue_pushes_one(gateway):
    push_drift_metrics(verdict(mmd={"value": 0.5, "pvalue": None}), [], gateway=gateway.url, model="m")
    series = gateway.series()
    assert (value(series, "skewgate_drift_mmd"), value(series, "skewgate_drift_mmd_pvalue")) == (0.5, 1.0)


def test_the_nightly_series_is_pushed_only_when_the_verdict_has_one(gateway):
    push_drift_metrics(verdict(**DETAILS), [], gateway=gateway.url, model="m")
    assert not any(name.startswith("skewgate_drift_series_") for name, _ in gateway.series())
    push_drift_metrics(verdict(**DETAILS, series={"evalue": 12.5, "threshold": 40.0, "tonight_night_pvalue": 0.003,
                                                  "tonight_night_level": 6.8e-5}), [], gateway=gateway.url, model="m")
    series = gateway.series()
    assert value(series, "skewgate_drift_series_evalue") == 12.5
    assert value(series, "skewgate_drift_series_threshold") == 40.0
    assert value(series, "skewgate_drift_series_night_pvalue") == 0.003
    assert value(series, "skewgate_drift_series_night_level") == 6.8e-5


def test_a_series_before_its_first_night_pushes_a_night_that_cannot_alarm(gateway):
    push_drift_metrics(verdict(**DETAILS, series={"evalue": 0.0, "threshold": 40.0}), [], gateway=gateway.url,
                       model="m")
    series = gateway.series()
    assert value(series, "skewgate_drift_series_night_pvalue") > value(series, "skewgate_drift_series_night_level")


def test_the_last_run_timestamp_is_now(gateway):
    before = time.time()
    push_drift_metrics(verdict(**DETAILS), [], gateway=gateway.url, model="m")
    stamp = value(gateway.series(), "skewgate_drift_last_run_timestamp_seconds")
    assert before - 1 <= stamp <= time.time() + 1


def test_the_series_names_are_the_ones_the_chart_reads(gateway):
    push_drift_metrics(verdict(**DETAILS, series={"evalue": 1.0, "threshold": 40.0}), [row("a")],
                       gateway=gateway.url, model="m")
    assert {name for name, _ in gateway.series()} == {
        "skewgate_drift_status", "skewgate_drift_mmd", "skewgate_drift_mmd_pvalue", "skewgate_drift_features_drifted",
        "skewgate_drift_ks_error_bound", "skewgate_drift_feature_statistic", "skewgate_drift_feature_pvalue",
        "skewgate_drift_feature_effect", "skewgate_drift_feature_drifted", "skewgate_drift_series_evalue",
        "skewgate_drift_series_threshold", "skewgate_drift_series_night_pvalue", "skewgate_drift_series_night_level",
        "skewgate_drift_last_run_timestamp_seconds"}


@pytest.mark.parametrize("status", [400, 500])
def test_a_gateway_that_refuses_is_rejected_naming_it_and_the_status(gateway, status):
    gateway.status = status
    with pytest.raises(Rejected) as caught:
        push_drift_metrics(verdict(**DETAILS), [], gateway=gateway.url, model="m")
    assert str(caught.value).startswith(f"pushgateway {gateway.url}: HTTP Error {status}")
    assert len(gateway.requests) == 1


def test_a_gateway_nothing_listens_on_is_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable) as caught:
        push_drift_metrics(verdict(**DETAILS), [], gateway=url, model="m", timeout=2.0)
    assert str(caught.value).startswith(f"pushgateway {url}: ")
    assert "refused" in str(caught.value).lower()


def test_a_gateway_that_never_answers_is_unreachable_within_the_timeout():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts the connection, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(Unreachable, match=f"^pushgateway {url}: "):
            push_drift_metrics(verdict(**DETAILS), [], gateway=url, model="m", timeout=0.3)
        assert time.monotonic() - started < 5.0
