"""What skewgate writes into MLflow, by name and shape, without MLflow: tag names, metric keys, the nightly drift
series, table columns, promotion-log record files, and finding a registered version's ONNX file by its digest.

Pure (no mlflow import), so the conventions are tested without a store; `mlflow_log` does the writing.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skewgate.common.errors import InputError
from skewgate.common.verdict import Verdict

PIPELINE_RUN_TAG = "skewgate.pipeline_run_id"
PROMOTION_LOG_TAG = "skewgate.kind"
PROMOTION_LOG_DIR = "promotions"
VERDICT_DIGEST_TAG = "skewgate.verdict_sha256"
ONNX_DIGEST_TAG = "skewgate.onnx_sha256"
# KFP run ids are UUIDs; kfp.local's are names with a timestamp. Nothing else may reach a filter string.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
OUTCOME_TAG = "skewgate.outcome"
# MLflow 3.x marks what an experiment is for with this tag ("custom_model_development": traditional ML, runs
# table; "genai_development": traces), which its UI's experiment-kind selector reads and writes (mlflow/server/js;
# mlflow/assistant/skills/mlflow-onboarding/SKILL.md). The 3.17 UI chooses the landing page from its own
# workflow switch instead (header "GenAI | Model training", `?workflowType=` in the URL, default GenAI), so the
# links skewgate prints carry `workflowType=machine_learning` as well (`runs_table_link`; checked in Chromium by
# tests/integration/test_mlflow_ui_in_browser.py).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
DRIFT_HISTORY_TAG = "drift-history"  # value of `skewgate.kind` on the run that charts nightly drift over nights
PROMOTION_LOG_KIND = "promotion-log"  # value of `skewgate.kind` on the experiment's promotion-log run
MLFLOW_BATCH_LIMIT = 1000  # metrics per log_batch call


def metric_key(name: str) -> str:
    # MLflow keys allow alphanumerics, _ - . space / ; anything else (for example ':') becomes '_'.
    return "".join(ch if ch.isalnum() or ch in "_-. /" else "_" for ch in name)


def step_metrics(step: str, verdict: Verdict) -> dict[str, float]:
    """`<step>.<check>` → the check's value, or 1/0 for passed when it has none (keys already MLflow-safe)."""
    return {metric_key(f"{step}.{c.name}"): c.value if c.value is not None else float(c.passed)
            for c in verdict.checks}


def step_tags(verdict: Verdict) -> dict[str, str]:
    """The status tags of a step run, with the verdict's digest (promote matches a pipeline's verdicts to it)."""
    tags = {"skewgate.status": verdict.status, "skewgate.message": verdict.message[:4000],
            VERDICT_DIGEST_TAG: verdict.digest()}
    if verdict.subject is not None:
        tags["skewgate.subject_sha256"] = verdict.subject.sha256
    return tags


def table_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows of one shape as MLflow table columns; values that are not scalars become JSON text."""
    plain = [{k: v if isinstance(v, str | int | float | bool) or v is None else json.dumps(v)
              for k, v in row.items()} for row in rows]
    keys = list(dict.fromkeys(k for row in plain for k in row))
    return {k: [row.get(k) for row in plain] for k in keys}


def drift_statistics(verdict: Verdict) -> dict[str, float]:
    """`drift.<check>` per check with a value, `drift.passed`, `drift.mmd2`, and per feature
    `drift.feature.<name>.statistic` / `.pvalue` (at most 200 features, as the verdict lists them)."""
    out = {f"drift.{c.name}": c.value for c in verdict.checks if c.value is not None}
    out["drift.passed"] = float(verdict.status in {"pass", "warn"})
    mmd = verdict.details.get("mmd")
    if isinstance(mmd, Mapping) and isinstance(mmd.get("value"), int | float):
        out["drift.mmd2"] = float(mmd["value"])
    for row in verdict.details.get("features", ())[:200]:
        if not isinstance(row, Mapping) or "feature" not in row:
            continue
        for stat in ("statistic", "pvalue"):
            value = row.get(stat)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                out[f"drift.feature.{row['feature']}.{stat}"] = float(value)
    return out


def drift_night(verdict: Verdict) -> tuple[int, int]:
    """(timestamp in ms, night) of a nightly verdict: its run date, and the days since 1970-01-01 of that date
    (the series' step, so that every night is one point whenever it was logged)."""
    when = run_date(verdict)
    return int(when.timestamp() * 1000), int(when.timestamp() // 86400)


def run_date(verdict: Verdict) -> datetime:
    for text in (verdict.details.get("run_date"), verdict.created_at):
        with contextlib.suppress(TypeError, ValueError):
            when = datetime.fromisoformat(str(text))
            return when if when.tzinfo else when.replace(tzinfo=UTC)
    return datetime.now(UTC)


def promotion_record(record: Mapping[str, Any]) -> tuple[str, bytes]:
    """(file name, bytes) of one promotion-log record: `<time>-<random>.json`, unique per attempt, so that
    concurrent promotions never write the same file."""
    file_name = f"{str(record['at']).replace(':', '')}-{uuid.uuid4().hex[:12]}.json"
    return file_name, (json.dumps(dict(record), sort_keys=True) + "\n").encode()


def version_description(markdown: str, *, experiment_id: str, parent_run_id: str) -> str:
    """A version's description: `markdown` and a link to the pipeline's parent run in the MLflow UI."""
    link = f"#/experiments/{experiment_id}/runs/{parent_run_id}?workflowType=machine_learning"
    return f"{markdown}\n\nPipeline run: [{parent_run_id[:8]}]({link})"[:60000]


def find_by_digest(local: Path, tags: Mapping[str, str], where: str) -> tuple[Path, str]:
    """The downloaded file whose SHA-256 equals the version's `skewgate.onnx_sha256` tag, and that digest.

    Found by digest, not by name: a bare `onnx/<file>` folder (a KFP output has no suffix) and an MLflow Model
    directory (`MLmodel` + `model.onnx`) both work. Files that do not match their evidence are an `InputError`
    naming `where`: nothing downloaded from the registry is trusted without it."""
    from skewgate.common.io import sha256_file

    expected = tags.get(ONNX_DIGEST_TAG)
    if not expected:
        raise InputError(where, field=ONNX_DIGEST_TAG, expected="the SHA-256 tag promote writes",
                         found="no such tag")
    candidates = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]
    digests = {path: sha256_file(path) for path in candidates}
    for path, digest in digests.items():
        if digest == expected:
            return path, digest
    listing = ", ".join(f"{p.relative_to(local) if p != local else p.name} sha256 {d}" for p, d in digests.items())
    raise InputError(where, field=ONNX_DIGEST_TAG, expected=f"a file with sha256 {expected}",
                     found=listing or "no file in the version's artifacts")
