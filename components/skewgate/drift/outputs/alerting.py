"""Drift where operators look: push a drift verdict's figures to a Prometheus Pushgateway (`prometheus-client`).

Series (grouped by `job` and `model` on the gateway, so each model's latest run replaces its previous one):

- `skewgate_drift_status{status}`: 1 for the verdict's status, 0 for the others (pass, warn, fail, error);
- `skewgate_drift_mmd`, `skewgate_drift_mmd_pvalue`, `skewgate_drift_features_drifted`, `skewgate_drift_ks_error_bound`;
- per feature (the `MAX_FEATURES` most drifted): `skewgate_drift_feature_statistic{feature,test}` (KS D or
  chi-square), `skewgate_drift_feature_pvalue` (adjusted), `skewgate_drift_feature_effect`,
  `skewgate_drift_feature_drifted`;
- nightly, over the series (stats/series.py): `skewgate_drift_series_evalue` and `skewgate_drift_series_threshold`
  (the e-process), `skewgate_drift_series_night_pvalue` and `skewgate_drift_series_night_level` (tonight alone);
- `skewgate_drift_last_run_timestamp_seconds`, for an alert when the nightly run stops running.

The chart's alert rules and Grafana dashboard (`charts/skewgate/files/`) read these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skewgate.common.pushgateway import push_group
from skewgate.common.verdict import STATUSES, Verdict

JOB = "skewgate_nightly_drift"
MAX_FEATURES = 100  # bounds the series per model; the full table is in MLflow


def push_drift_metrics(verdict: Verdict, features: Sequence[Mapping[str, Any]], *, gateway: str, model: str,
                       job: str = JOB, timeout: float = 10.0) -> None:
    """Replace this model's group on the gateway with the verdict's figures (`push_group`: `Unreachable`,
    `Rejected`)."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, doc, labelnames=list(labels), registry=registry)

    status = gauge("skewgate_drift_status", "1 for the drift verdict's status, 0 for the others", ["status"])
    for value in STATUSES:
        status.labels(status=value).set(1.0 if verdict.status == value else 0.0)
    mmd = verdict.details.get("mmd", {})
    gauge("skewgate_drift_mmd", "MMD² between the reference and the current data").set(mmd.get("value") or 0.0)
    gauge("skewgate_drift_mmd_pvalue", "p-value of the MMD test").set(_number(mmd.get("pvalue"), 1.0))
    series = verdict.details.get("series")
    if series:  # the nightly run's anytime-valid series (series.py): the e-process, or tonight alone, alarms
        gauge("skewgate_drift_series_evalue", "running e-value over the nights against this profile").set(
            _number(series.get("evalue"), 0.0))
        gauge("skewgate_drift_series_threshold",
              "the series alarms at this e-value (1/(alpha - delta - alpha_night))").set(
            _number(series.get("threshold"), 0.0))
        gauge("skewgate_drift_series_night_pvalue", "tonight's two-sample p-value (Bonferroni over features)").set(
            _number(series.get("tonight_night_pvalue"), 1.0))
        gauge("skewgate_drift_series_night_level", "the series alarms on tonight alone at or below this p").set(
            _number(series.get("tonight_night_level"), 0.0))
    gauge("skewgate_drift_ks_error_bound", "largest error of a KS statistic from its sketches").set(
        _number(verdict.details.get("ks_error_bound"), 0.0))
    gauge("skewgate_drift_features_drifted", "features whose KS/chi-square test flags drift").set(
        sum(1 for row in features if row.get("drifted")))
    per_feature = {
        "statistic": gauge("skewgate_drift_feature_statistic", "KS D or chi-square statistic", ["feature", "test"]),
        "adjusted_pvalue": gauge("skewgate_drift_feature_pvalue", "adjusted p-value", ["feature", "test"]),
        "effect": gauge("skewgate_drift_feature_effect", "KS D or Cramér's V", ["feature", "test"]),
        "drifted": gauge("skewgate_drift_feature_drifted", "1 when the feature drifted", ["feature", "test"]),
    }
    for row in list(features)[:MAX_FEATURES]:
        for key, series in per_feature.items():
            series.labels(feature=str(row["feature"]), test=str(row["test"])).set(_number(row.get(key), float("nan")))
    gauge("skewgate_drift_last_run_timestamp_seconds", "when the drift check last ran").set_to_current_time()
    push_group(registry, gateway=gateway, job=job, model=model, timeout=timeout)


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) else default  # None (not testable) → the default
