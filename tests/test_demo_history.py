"""The demo's two nights are two successive nights, as a schedule dates them: its MLflow store's drift-history run
charts each statistic as a line over two steps (one per night), not two values stacked on one night (#36)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = Path(os.environ.get("SKEWGATE_DEMO_WORKDIR", ROOT / "work" / "demo"))


def test_the_demo_nights_are_one_point_each_on_successive_nights():
    store = DEMO / "mlflow.db"
    if not store.exists():
        pytest.skip(f"no demo store at {store}: `make demo` writes it (.ci/run runs the demo first)")
    from mlflow import MlflowClient

    from skewgate.common import mlflow_conventions as conv
    from skewgate.demo.run import MODEL_NAME

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name(MODEL_NAME)
    history = client.search_runs([experiment.experiment_id],
                                 f"tags.`{conv.PROMOTION_LOG_TAG}` = '{conv.DRIFT_HISTORY_TAG}'")
    assert len(history) == 1
    metrics = history[0].data.metrics
    assert metrics
    for key in sorted(metrics)[:3]:
        steps = [m.step for m in client.get_metric_history(history[0].info.run_id, key)]
        assert sorted(steps) == [min(steps), min(steps) + 1], (key, steps)
