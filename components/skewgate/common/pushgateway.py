"""Push one model's group of gauges to a Prometheus Pushgateway (`prometheus-client`, the `alerting` extra): the
group is keyed by `job` and `model`, so each model's latest run replaces its previous one."""

from __future__ import annotations

import logging
from typing import Any

from skewgate.common.errors import Rejected, Unreachable

log = logging.getLogger(__name__)


def push_group(registry: Any, *, gateway: str, job: str, model: str, timeout: float = 10.0) -> None:
    """Replace the (`job`, `model`) group on `gateway` with `registry`'s gauges. `Unreachable` when the gateway
    cannot be reached, `Rejected` when it refuses (the verdict itself stands: the caller decides what an unpushed
    verdict means)."""
    from urllib.error import HTTPError

    from prometheus_client import push_to_gateway

    try:
        push_to_gateway(gateway, job=job, registry=registry, grouping_key={"model": model}, timeout=timeout)
    except HTTPError as err:  # the gateway answered with an error status
        raise Rejected(f"pushgateway {gateway}: {err}") from err
    except OSError as err:  # URLError (connection refused, DNS), timeouts
        raise Unreachable(f"pushgateway {gateway}: {err}") from err
    log.info("pushed %s metrics for %s to %s", job, model, gateway)
