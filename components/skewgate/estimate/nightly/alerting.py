"""The nightly estimate where operators look: its figures pushed to a Prometheus Pushgateway, beside drift's.

Series (grouped by `job` and `model`):

- `skewgate_estimate_status{status}`: 1 for the verdict's status, 0 for the others (pass, warn, fail, error);
- `skewgate_estimated_accuracy`, `skewgate_estimated_accuracy_low`, `skewgate_estimated_accuracy_high` (the
  interval), `skewgate_estimate_reference_accuracy`, `skewgate_estimate_max_drop`;
- `skewgate_estimate_last_run_timestamp_seconds`, for an alert when the nightly estimate stops running.

The chart's alert rules and Grafana dashboard (`charts/skewgate/files/`) read these names.
"""

from __future__ import annotations

from typing import Any

from skewgate.common.pushgateway import push_group
from skewgate.common.verdict import STATUSES, Verdict

JOB = "skewgate_nightly_estimate"


def push_estimate_metrics(verdict: Verdict, *, gateway: str, model: str, job: str = JOB,
                          timeout: float = 10.0) -> None:
    """Replace this model's group on the gateway with the verdict's figures (`push_group`: `Unreachable`,
    `Rejected`). A night whose interval is unknown (no finite scores) pushes its status and timestamp only."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, doc, labelnames=list(labels), registry=registry)

    status = gauge("skewgate_estimate_status", "1 for the estimate verdict's status, 0 for the others", ("status",))
    for value in STATUSES:
        status.labels(status=value).set(1.0 if verdict.status == value else 0.0)
    details: dict[str, Any] = dict(verdict.details)
    interval = details.get("estimated_interval")
    if details.get("estimated_accuracy") is not None and interval:
        gauge("skewgate_estimated_accuracy", "accuracy estimated without labels (CBPE)").set(
            details["estimated_accuracy"])
        gauge("skewgate_estimated_accuracy_low", "the estimate interval's low end").set(interval[0])
        gauge("skewgate_estimated_accuracy_high", "the estimate interval's high end").set(interval[1])
    if isinstance(details.get("reference_accuracy"), int | float):
        gauge("skewgate_estimate_reference_accuracy", "accuracy realised on the labelled reference").set(
            details["reference_accuracy"])
    if isinstance(verdict.settings.get("max_drop"), int | float):
        gauge("skewgate_estimate_max_drop", "the largest drop below the reference the gate allows").set(
            verdict.settings["max_drop"])
    gauge("skewgate_estimate_last_run_timestamp_seconds", "when the nightly estimate last ran").set_to_current_time()
    push_group(registry, gateway=gateway, job=job, model=model, timeout=timeout)
