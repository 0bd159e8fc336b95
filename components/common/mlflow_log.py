"""Everything skewgate says to MLflow: tracking (parent run per pipeline run, ended with the run's outcome by
`finish_pipeline_run`; nested run per step; nightly drift as a series over nights) and the model registry
(versions, evidence tags, aliases, the promotion log). The only module that imports mlflow.

Conventions (DESIGN.md): one experiment per registered model; metrics are `<step>.<check>`; the verdict JSON
and the tensor-stats table are artifacts of the step run. Works the same against `sqlite:///…` (the embedded
default) and a remote server (`MLFLOW_TRACKING_URI`, basic auth via `MLFLOW_TRACKING_USERNAME/PASSWORD`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from skewgate.common.errors import BackendError, InputError
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from skewgate.common.outcome import Outcome

log = logging.getLogger(__name__)
PIPELINE_RUN_TAG = "skewgate.pipeline_run_id"
PROMOTION_LOG_TAG = "skewgate.kind"
PROMOTION_LOG_FILE = "promotions.jsonl"
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


def _mlflow_error_code(err: Exception) -> str | None:
    return getattr(err, "error_code", None)


@dataclass
class Tracking:
    """A connection to one MLflow tracking server/store and one experiment. Build it with `connect`."""

    uri: str
    experiment_id: str
    client: MlflowClient = field(repr=False)

    @contextlib.contextmanager
    def step_run(self, step: str, *, pipeline_run_id: str | None) -> Iterator[StepRun]:
        """A nested run for `step` under the pipeline's parent run; ended FINISHED, or FAILED on exception.

        Without a pipeline run id (an ad-hoc CLI call) the parent run is this call's own, and it ends with the
        step: FINISHED for pass/warn, FAILED otherwise, tagged with the outcome like a pipeline's parent run."""
        from skewgate.common.outcome import step_outcome

        parent = self.parent_run(pipeline_run_id)
        run = self._call(lambda: self.client.create_run(
            self.experiment_id, run_name=step,
            tags={"mlflow.parentRunId": parent, "skewgate.step": step, PIPELINE_RUN_TAG: pipeline_run_id or ""}))
        status = "FAILED"
        step_run = StepRun(self, run.info.run_id, step)
        error = ""
        try:
            yield step_run
            status = "FINISHED"
        except BaseException as err:
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            with contextlib.suppress(Exception):  # never mask the real error with a cleanup error
                self.client.set_terminated(run.info.run_id, status=status)
            if not pipeline_run_id:
                with contextlib.suppress(Exception):
                    self.finish_run(parent, step_outcome(step_run.verdict, error=error))

    def find_parent_run(self, pipeline_run_id: str) -> str | None:
        """The parent run of this pipeline run, if a step has created it."""
        found = self._call(lambda: self.client.search_runs(
            [self.experiment_id], f"tags.`{PIPELINE_RUN_TAG}` = '{pipeline_run_id}' "
            "and tags.`skewgate.role` = 'pipeline'", max_results=1))
        return str(found[0].info.run_id) if found else None

    def parent_run(self, pipeline_run_id: str | None) -> str:
        """Find the parent run of this pipeline run, or create it (an ad-hoc CLI call gets a fresh one)."""
        if pipeline_run_id:
            found = self.find_parent_run(pipeline_run_id)
            if found:
                return found
        name = f"pipeline-{pipeline_run_id}" if pipeline_run_id else "skewgate-cli"
        run = self._call(lambda: self.client.create_run(
            self.experiment_id, run_name=name,
            tags={PIPELINE_RUN_TAG: pipeline_run_id or "", "skewgate.role": "pipeline"}))
        return str(run.info.run_id)

    def run_verdicts(self, parent_run_id: str) -> dict[str, Verdict]:
        """The verdicts the step runs under `parent_run_id` logged, by step (a step that logged none is absent)."""

        def read() -> dict[str, Verdict]:
            children = self.client.search_runs([self.experiment_id],
                                               f"tags.`mlflow.parentRunId` = '{parent_run_id}'")
            verdicts = {}
            with tempfile.TemporaryDirectory() as tmp:
                for child in sorted(children, key=lambda r: r.info.start_time):
                    step = child.data.tags.get("skewgate.step", "")
                    name = f"{step}.verdict.json"
                    if any(f.path == name for f in self.client.list_artifacts(child.info.run_id)):
                        verdicts[step] = Verdict.read(self.client.download_artifacts(child.info.run_id, name, tmp))
            return verdicts

        result: dict[str, Verdict] = self._call(read)
        return result

    def finish_run(self, run_id: str, outcome: Outcome) -> None:
        """End a parent run with its outcome: FINISHED when it succeeded, FAILED otherwise; tags for the outcome,
        the digest and the reason (also the run's description), and the summary metrics."""
        tags = {OUTCOME_TAG: outcome.label, "skewgate.reason": outcome.reason[:5000],
                "mlflow.note.content": f"**{outcome.label}**: {outcome.reason}"[:5000], **outcome.tags}
        if outcome.digest:
            tags["skewgate.candidate_sha256"] = outcome.digest

        def write() -> None:
            from mlflow.entities import Metric, RunTag

            now = int(time.time() * 1000)
            self.client.log_batch(run_id, metrics=[Metric(_metric_key(k), v, now, 0)
                                                   for k, v in outcome.metrics.items()],
                                  tags=[RunTag(k, v) for k, v in tags.items()])
            self.client.set_terminated(run_id, status="FINISHED" if outcome.succeeded else "FAILED")

        self._call(write)

    def pipeline_verdicts(self, *, since_ms: int) -> tuple[str | None, dict[str, Verdict]]:
        """The newest pipeline parent run started at or after `since_ms`, and its steps' verdicts."""
        parents = self._call(lambda: self.client.search_runs(
            [self.experiment_id], f"tags.`skewgate.role` = 'pipeline' and attributes.start_time >= {since_ms}",
            order_by=["attributes.start_time DESC"], max_results=1))
        if not parents:
            return None, {}
        parent = str(parents[0].info.run_id)
        return parent, self.run_verdicts(parent)

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except Exception as err:
            raise BackendError(f"MLflow at {self.uri}: {type(err).__name__}: {err}") from err


@dataclass
class StepRun:
    tracking: Tracking
    run_id: str
    step: str
    verdict: Verdict | None = None  # the last one logged: an ad-hoc call's parent run ends with its status

    def log_verdict(self, verdict: Verdict) -> None:
        """Metrics `<step>.<check>` (value, or 1/0 for passed when a check has no value), status tags, the
        verdict JSON, and the checks and tensor statistics as MLflow tables."""
        client = self.tracking.client
        metrics = {}
        for check in verdict.checks:
            metrics[f"{self.step}.{check.name}"] = check.value if check.value is not None else float(check.passed)
        tags = {"skewgate.status": verdict.status, "skewgate.message": verdict.message[:4000]}
        if verdict.subject is not None:
            tags["skewgate.subject_sha256"] = verdict.subject.sha256

        def write() -> None:
            for name, value in metrics.items():
                client.log_metric(self.run_id, _metric_key(name), value)
            for key, value in tags.items():
                client.set_tag(self.run_id, key, value)
            with tempfile.TemporaryDirectory() as tmp:
                path = verdict.write(Path(tmp) / f"{self.step}.verdict.json")
                client.log_artifact(self.run_id, str(path))

        self.tracking._call(write)
        self.verdict = verdict
        self.log_table("checks.json", [vars(c) for c in verdict.checks])
        self.log_table("tensor_stats.json", [{**vars(s), "shape": list(s.shape)} for s in verdict.stats])

    def log_table(self, artifact_file: str, rows: list[dict[str, Any]]) -> None:
        """Rows of one shape as an MLflow table (viewable in the run's Artifacts tab)."""
        if rows:
            plain = [{k: v if isinstance(v, str | int | float | bool) or v is None else json.dumps(v)
                      for k, v in row.items()} for row in rows]
            keys = list(dict.fromkeys(k for row in plain for k in row))
            data = {k: [row.get(k) for row in plain] for k in keys}
            self.tracking._call(lambda: self.tracking.client.log_table(self.run_id, data=data,
                                                                       artifact_file=artifact_file))

    def log_artifact_as(self, source: str | Path, name: str, artifact_path: str | None = None) -> str:
        """Upload `source` under another file name (KFP output paths have no suffix: a heatmap must be `.png`)."""
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / name
            target.write_bytes(Path(source).read_bytes())
            return self.log_artifact(target, artifact_path)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> str:
        """Upload a file; returns the artifact URI of the folder it went to."""
        self.tracking._call(lambda: self.tracking.client.log_artifact(self.run_id, str(path), artifact_path))
        run = self.tracking._call(lambda: self.tracking.client.get_run(self.run_id))
        base = str(run.info.artifact_uri)
        return f"{base}/{artifact_path}" if artifact_path else base


def _metric_key(name: str) -> str:
    # MLflow keys allow alphanumerics, _ - . space / ; anything else (for example ':') becomes '_'.
    return "".join(ch if ch.isalnum() or ch in "_-. /" else "_" for ch in name)


def finish_pipeline_run(tracking: Tracking, pipeline_run_id: str, *, pipeline: str, final_state: str = "",
                        final_error: str = "") -> Outcome:
    """End the parent run of `pipeline_run_id` with the outcome its steps' verdicts add up to (the pipeline's exit
    handler calls this). A run whose steps never reached MLflow gets a parent run here, ended FAILED."""
    from skewgate.common.outcome import pipeline_outcome

    parent = tracking.parent_run(pipeline_run_id)
    verdicts = tracking.run_verdicts(parent)
    outcome = pipeline_outcome(pipeline, verdicts, final_state=final_state, final_error=final_error)
    outcome = dataclasses.replace(outcome, tags={**outcome.tags, "skewgate.pipeline": pipeline})
    if "nightly-drift" in verdicts:
        log_drift_night(tracking, verdicts["nightly-drift"], run_ids=[parent])
    tracking.finish_run(parent, outcome)
    return outcome


def log_drift_night(tracking: Tracking, verdict: Verdict, *, run_ids: list[str]) -> None:
    """Log a nightly drift verdict's statistics as one point of a series: step = the night (days since
    1970-01-01 of its run date), timestamp = the run date. They go to `run_ids` and to the experiment's
    `drift-history` run, whose charts in the MLflow UI then draw every statistic across nights (each nightly
    run is its own run, and MLflow draws a line only within one run)."""
    from mlflow.entities import Metric

    when = _run_date(verdict)
    timestamp = int(when.timestamp() * 1000)
    night = int(when.timestamp() // 86400)
    metrics = [Metric(_metric_key(k), v, timestamp, night) for k, v in drift_statistics(verdict).items()]

    def write() -> None:
        history = tracking.client.search_runs([tracking.experiment_id],
                                              f"tags.`{PROMOTION_LOG_TAG}` = '{DRIFT_HISTORY_TAG}'", max_results=1)
        if history:
            history_id = history[0].info.run_id
        else:  # ended at once: MLflow accepts metrics on a finished run, and no skewgate run stays RUNNING
            history_id = tracking.client.create_run(tracking.experiment_id, run_name="drift-history",
                                                    tags={PROMOTION_LOG_TAG: DRIFT_HISTORY_TAG}).info.run_id
            tracking.client.set_terminated(history_id, status="FINISHED")
        for run_id in [*run_ids, history_id]:
            for start in range(0, len(metrics), 1000):  # MLflow's log_batch limit
                tracking.client.log_batch(run_id, metrics=metrics[start:start + 1000])

    tracking._call(write)


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


def _run_date(verdict: Verdict) -> datetime:
    for text in (verdict.details.get("run_date"), verdict.created_at):
        with contextlib.suppress(TypeError, ValueError):
            when = datetime.fromisoformat(str(text))
            return when if when.tzinfo else when.replace(tzinfo=UTC)
    return datetime.now(UTC)


def runs_table_link(ui: str, experiment_id: str) -> str:
    """The MLflow UI address (`ui`: e.g. http://127.0.0.1:5000) that opens this experiment's runs table."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def connect(uri: str, *, experiment: str, deadline_s: float = 30.0) -> Tracking:
    """Connect, retrying with backoff until `deadline_s`; then `BackendError` (the CLI exits 2)."""
    # MLflow's own HTTP retries would wait minutes on a dead server: we own the deadline instead.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # no "creating tables" chatter on stderr
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    deadline = time.monotonic() + deadline_s
    delay = 0.5
    while True:
        try:
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else _create_experiment(client, uri, experiment)
            if found is not None and EXPERIMENT_KIND_TAG not in found.tags:  # made before skewgate tagged it
                client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return Tracking(uri=uri, experiment_id=str(experiment_id), client=client)
        except Exception as err:
            if time.monotonic() + delay > deadline:
                raise BackendError(f"MLflow at {uri} unreachable for {deadline_s:.0f}s: "
                                   f"{type(err).__name__}: {err}") from err
            log.warning("MLflow at %s not reachable (%s); retrying in %.1fs", uri, type(err).__name__, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _create_experiment(client: MlflowClient, uri: str, name: str) -> str:
    location = None
    if uri.startswith("sqlite:///"):
        # Keep artifacts beside the embedded store instead of in ./mlruns of whatever the cwd is.
        location = (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").resolve().as_uri()
    try:
        return str(client.create_experiment(name, artifact_location=location,
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}))
    except Exception as err:
        if _mlflow_error_code(err) != "RESOURCE_ALREADY_EXISTS":  # another step created it meanwhile
            raise
        found = client.get_experiment_by_name(name)
        assert found is not None
        return str(found.experiment_id)


class MlflowRegistry:
    """The MLflow model registry behind promote's `Registry` protocol. ONNX files are uploaded to `step_run`."""

    def __init__(self, step_run: StepRun) -> None:
        self.run = step_run
        self.client = step_run.tracking.client
        self._call = step_run.tracking._call

    def model_exists(self, name: str) -> bool:
        found = _or_none(self.run.tracking.uri, lambda: self.client.get_registered_model(name),
                         missing=frozenset({"RESOURCE_DOES_NOT_EXIST"}))
        return found is not None

    def version_exists(self, name: str, version: str) -> bool:
        return _or_none(self.run.tracking.uri, lambda: self.client.get_model_version(name, version)) is not None

    def find_version(self, name: str, sha256: str) -> str | None:
        if not self.model_exists(name):
            return None
        found = self._call(lambda: self.client.search_model_versions(
            f"name='{name}' and tags.`skewgate.onnx_sha256`='{sha256}'"))
        return str(min(int(v.version) for v in found)) if found else None

    def register(self, name: str, artifact: Path, sha256: str) -> str:
        if not self.model_exists(name):
            with contextlib.suppress(Exception):  # a concurrent promote may have created it
                self.client.create_registered_model(name)
        source = self.run.log_artifact(artifact, "onnx")
        version = self._call(lambda: self.client.create_model_version(
            name, source=source, run_id=self.run.run_id, tags={"skewgate.onnx_sha256": sha256}))
        return str(version.version)

    def get_tags(self, name: str, version: str) -> dict[str, str]:
        return dict(self._call(lambda: self.client.get_model_version(name, version)).tags)

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None:
        def write() -> None:
            for key, value in tags.items():
                self.client.set_model_version_tag(name, version, key, value)

        self._call(write)

    def get_alias(self, name: str, alias: str) -> str | None:
        return alias_version(self.run.tracking, name, alias)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        self._call(lambda: self.client.set_registered_model_alias(name, alias, version))

    def download(self, artifact_uri: str, directory: Path) -> Path:
        """Fetch one artifact by URI (as recorded in a tag) into `directory`."""
        import mlflow.artifacts

        return Path(self._call(lambda: mlflow.artifacts.download_artifacts(
            artifact_uri=artifact_uri, dst_path=str(directory), tracking_uri=self.run.tracking.uri)))

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        """Append one JSON line to `promotions.jsonl` of the experiment's promotion-log run (created once)."""
        tracking = self.run.tracking

        def append() -> None:
            found = self.client.search_runs([tracking.experiment_id],
                                            f"tags.`{PROMOTION_LOG_TAG}` = 'promotion-log'", max_results=1)
            run_id = found[0].info.run_id if found else self.client.create_run(
                tracking.experiment_id, run_name=f"promotion-log:{name}",
                tags={PROMOTION_LOG_TAG: "promotion-log"}).info.run_id
            with tempfile.TemporaryDirectory() as tmp:
                lines = ""
                if any(f.path == PROMOTION_LOG_FILE for f in self.client.list_artifacts(run_id)):
                    local = self.client.download_artifacts(run_id, PROMOTION_LOG_FILE, tmp)
                    lines = Path(local).read_text(encoding="utf-8")
                target = Path(tmp) / "out" / PROMOTION_LOG_FILE
                target.parent.mkdir()
                target.write_text(lines + json.dumps(dict(record), sort_keys=True) + "\n", encoding="utf-8")
                self.client.log_artifact(run_id, str(target))
                self.client.log_artifact(self.run.run_id, str(target))

        self._call(append)


# MLflow answers a lookup of something that is not there with one of these codes, depending on the store.
_MISSING = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"})
T = TypeVar("T")


def _or_none(uri: str, lookup: Callable[[], T], *, missing: frozenset[str] = _MISSING) -> T | None:
    """`lookup()`, or None when MLflow says the thing does not exist; any other failure is a `BackendError`."""
    try:
        return lookup()
    except Exception as err:
        if _mlflow_error_code(err) in missing:
            return None
        raise BackendError(f"MLflow registry at {uri}: {type(err).__name__}: {err}") from err


def alias_version(tracking: Tracking, name: str, alias: str) -> str | None:
    """The version an alias points at, or None when the model or the alias does not exist."""
    found = _or_none(tracking.uri, lambda: tracking.client.get_model_version_by_alias(name, alias))
    return None if found is None else str(found.version)


def load_pytorch_model(uri: str) -> Any:
    """Load an MLflow pytorch model (`models:/…`, `runs:/…`). This unpickles code: trusted registries only."""
    import mlflow.pytorch

    try:
        return mlflow.pytorch.load_model(uri)
    except Exception as err:
        raise InputError(uri, expected="an MLflow pytorch model URI", found=f"{type(err).__name__}: {err}") from err
