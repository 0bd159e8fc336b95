"""Read back what promote appended to the promotion log (a test's view: users read the records in the MLflow UI,
under each promotion run's artifacts)."""

import json
import tempfile
from pathlib import Path
from typing import Any

from skewgate.common import mlflow_conventions as conv
from skewgate.common.mlflow_log import Tracking


def read_promotion_log(tracking: Tracking) -> list[dict[str, Any]]:
    """Every promotion record of the experiment, oldest first."""

    query = f"tags.`{conv.PROMOTION_LOG_TAG}` = '{conv.PROMOTION_LOG_KIND}'"
    client = tracking.client
    texts = []
    with tracking.mapped("read the promotion log"), tempfile.TemporaryDirectory() as tmp:
        for run in client.search_runs([tracking.experiment_id], query, max_results=50):
            for item in client.list_artifacts(run.info.run_id, conv.PROMOTION_LOG_DIR):
                texts.append(Path(client.download_artifacts(run.info.run_id, item.path, tmp)).read_text("utf-8"))
    return sorted((json.loads(text) for text in texts), key=lambda r: str(r.get("at")))
