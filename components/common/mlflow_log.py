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
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from skewgate.common.errors import BackendError, InputError
from skewgate.common.strict_json import SHA256_HEX
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from skewgate.common.outcome import Outcome

log = logging.getLogger(__name__)
PIPELINE_RUN_TAG = "skewgate.pipeline_run_id"
PROMOTION_LOG_TAG = "skewgate.kind"
PROMOTION_LOG_DIR = "promotions"
VERDICT_DIGEST_TAG = "skewgate.verdict_sha256"
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
        """The parent run of this pipeline run, if one exists."""
        if not RUN_ID_PATTERN.fullmatch(pipeline_run_id):
            raise InputError("--pipeline-run-id", expected=f"a run id matching {RUN_ID_PATTERN.pattern}",
                             found=repr(pipeline_run_id))
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

    def log_verdict(self, verdict: Verdict, *, envelope: Mapping[str, Any] | None = None) -> None:
        """Metrics `<step>.<check>` (value, or 1/0 for passed when a check has no value), status tags, the
        verdict JSON and its digest (promote matches a pipeline's verdicts against it), its signed envelope when
        there is one, and the checks and tensor statistics as MLflow tables."""
        client = self.tracking.client
        metrics = {}
        for check in verdict.checks:
            metrics[f"{self.step}.{check.name}"] = check.value if check.value is not None else float(check.passed)
        tags = {"skewgate.status": verdict.status, "skewgate.message": verdict.message[:4000],
                VERDICT_DIGEST_TAG: verdict.digest()}
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
                if envelope is not None:
                    signed = Path(tmp) / f"{self.step}.verdict.intoto.jsonl"
                    signed.write_text(json.dumps(envelope, sort_keys=True) + "\n", encoding="utf-8")
                    client.log_artifact(self.run_id, str(signed))

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

    def log_artifacts(self, directory: str | Path, artifact_path: str) -> str:
        """Upload a folder's files under `artifact_path`; returns that folder's artifact URI."""
        self.tracking._call(lambda: self.tracking.client.log_artifacts(self.run_id, str(directory), artifact_path))
        run = self.tracking._call(lambda: self.tracking.client.get_run(self.run_id))
        return f"{run.info.artifact_uri}/{artifact_path}"

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
    """The MLflow model registry behind the `Registry` protocol (common/registry.py).

    A version is an MLflow Model (the `mlflow.onnx` flavour: signature from the ONNX graph, dynamic batch as -1,
    an input example when one is given, pinned requirements) whose `model.onnx` holds the gated bytes, so that
    `mlflow.pyfunc.load_model("models:/NAME@champion")` predicts what ONNX Runtime computes from the judged file.
    No user-supplied string is ever pasted into a filter: names are compared in Python, digests are hex.
    """

    def __init__(self, step_run: StepRun, *, input_example: Mapping[str, Any] | None = None) -> None:
        self.run = step_run
        self.client = step_run.tracking.client
        self._call = step_run.tracking._call
        self.input_example = dict(input_example) if input_example else None

    def model_exists(self, name: str) -> bool:
        found = _or_none(self.run.tracking.uri, lambda: self.client.get_registered_model(name),
                         missing=frozenset({"RESOURCE_DOES_NOT_EXIST"}))
        return found is not None

    def version_exists(self, name: str, version: str) -> bool:
        return _or_none(self.run.tracking.uri, lambda: self.client.get_model_version(name, version)) is not None

    def find_version(self, name: str, sha256: str) -> str | None:
        """The lowest version of `name` registered for this digest (there is one unless a race is under way)."""
        if not SHA256_HEX.fullmatch(sha256):
            raise InputError("onnx", field="sha256", expected="64 lowercase hex digits", found=sha256)
        found = self._call(lambda: self.client.search_model_versions(
            f"tags.`skewgate.onnx_sha256` = '{sha256}'", max_results=10000))
        versions = sorted(int(v.version) for v in found if v.name == name)
        return str(versions[0]) if versions else None

    def register(self, name: str, artifact: Path, sha256: str, *, artifact_path: str = "model") -> str:
        """Register the ONNX as an MLflow Model version. Concurrent promotions of one file may each get this
        far: every one of them then keeps the lowest version and deletes its own duplicate, so exactly one
        version carries the digest."""
        try:
            self.client.create_registered_model(name)
        except Exception as err:
            if _mlflow_error_code(err) != "RESOURCE_ALREADY_EXISTS":  # a concurrent promote may have created it
                raise BackendError(f"MLflow registry at {self.run.tracking.uri}: {err}") from err
        source = self.log_onnx_model(artifact, sha256, artifact_path)
        created = self._call(lambda: self.client.create_model_version(
            name, source=source, run_id=self.run.run_id, tags={"skewgate.onnx_sha256": sha256}))
        mine = str(created.version)
        winner = self.find_version(name, sha256) or mine
        if winner != mine:
            log.info("%s: version %s already holds sha256 %s; dropping duplicate v%s", name, winner, sha256, mine)
            self._call(lambda: self.client.delete_model_version(name, mine))
        return winner

    def log_onnx_model(self, artifact: Path, sha256: str, artifact_path: str = "model") -> str:
        """Save `artifact` as an MLflow Model into this run; returns its artifact URI."""
        import shutil

        import mlflow.onnx
        import onnx

        from skewgate.common.io import sha256_file

        model = onnx.load(str(artifact))
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / artifact_path
            mlflow.onnx.save_model(model, str(target), signature=onnx_signature(model),
                                   input_example=self.input_example, pip_requirements=_pinned_requirements())
            # save_model re-serialises the proto; the registry must hold the judged bytes themselves
            shutil.copyfile(artifact, target / "model.onnx")
            if sha256_file(target / "model.onnx") != sha256:
                raise BackendError(f"{artifact} changed while it was being registered")
            self._call(lambda: self.client.log_artifacts(self.run.run_id, str(target), artifact_path))
        run = self._call(lambda: self.client.get_run(self.run.run_id))
        return f"{run.info.artifact_uri}/{artifact_path}"

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

    def set_description(self, name: str, version: str, markdown: str) -> None:
        """The version's description, with a link to the pipeline's parent run in the MLflow UI."""
        run = self._call(lambda: self.client.get_run(self.run.run_id))
        parent = run.data.tags.get("mlflow.parentRunId", self.run.run_id)
        link = f"#/experiments/{self.run.tracking.experiment_id}/runs/{parent}?workflowType=machine_learning"
        text = f"{markdown}\n\nPipeline run: [{parent[:8]}]({link})"
        self._call(lambda: self.client.update_model_version(name, version, description=text[:60000]))

    def store_attestations(self, name: str, version: str, files: Mapping[str, bytes]) -> str:
        """The verdicts, their envelopes and promote's own, as artifacts of this promote run."""
        folder = f"attestations/v{version}"
        with tempfile.TemporaryDirectory() as tmp:
            for file_name, data in files.items():
                (Path(tmp) / file_name).write_bytes(data)
            return self.run.log_artifacts(tmp, folder)

    def logged_verdict_digests(self, pipeline_run_id: str) -> dict[str, str]:
        """Step → digest of the verdict its run logged under this pipeline run's parent run."""
        tracking = self.run.tracking
        parent = tracking.find_parent_run(pipeline_run_id)
        if parent is None:
            return {}
        children = self._call(lambda: self.client.search_runs(
            [tracking.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'", max_results=1000))
        return {c.data.tags["skewgate.step"]: c.data.tags[VERDICT_DIGEST_TAG] for c in children
                if "skewgate.step" in c.data.tags and VERDICT_DIGEST_TAG in c.data.tags}

    def download(self, artifact_uri: str, directory: Path) -> Path:
        """Fetch one artifact by URI (as recorded in a tag) into `directory`."""
        import mlflow.artifacts

        return Path(self._call(lambda: mlflow.artifacts.download_artifacts(
            artifact_uri=artifact_uri, dst_path=str(directory), tracking_uri=self.run.tracking.uri)))

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        """One new JSON file per attempt (`promotions/<time>-<id>.json`) in the experiment's promotion-log run,
        and a copy in this promote run. Append-only by construction: no record is ever read back and
        rewritten, so concurrent promotions cannot lose each other's records."""
        file_name = f"{record['at'].replace(':', '')}-{uuid.uuid4().hex[:12]}.json"
        data = (json.dumps(dict(record), sort_keys=True) + "\n").encode()
        log_run = self._promotion_log_run(name)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / file_name).write_bytes(data)
            for run_id in (log_run, self.run.run_id):
                self._call(lambda run_id=run_id: self.client.log_artifact(run_id, str(Path(tmp) / file_name),
                                                                          PROMOTION_LOG_DIR))

    def _promotion_log_run(self, name: str) -> str:
        """The experiment's one promotion-log run (a FINISHED run that only holds records). Two promotions that
        both create one keep the oldest and delete the other before either writes a record into it."""
        tracking = self.run.tracking
        query = f"tags.`{PROMOTION_LOG_TAG}` = 'promotion-log'"
        found = self._call(lambda: self.client.search_runs([tracking.experiment_id], query, max_results=50))
        if not found:
            created = self._call(lambda: self.client.create_run(
                tracking.experiment_id, run_name=f"promotion-log:{name}", tags={PROMOTION_LOG_TAG: "promotion-log"}))
            self._call(lambda: self.client.set_terminated(created.info.run_id, status="FINISHED"))
            found = self._call(lambda: self.client.search_runs([tracking.experiment_id], query, max_results=50))
        ordered = sorted(found, key=lambda r: (r.info.start_time, r.info.run_id))
        for duplicate in ordered[1:]:
            with contextlib.suppress(Exception):  # another promotion may have deleted it already
                self.client.delete_run(duplicate.info.run_id)
        return str(ordered[0].info.run_id)


@dataclass(frozen=True)
class Champion:
    """A registered version as downloaded: its tags, its MLflow Model folder, and its stored attestations."""

    version: str
    tags: dict[str, str]
    model_dir: Path
    attestations_dir: Path | None  # `attestations/v<N>` of the promote run, when the version names one


class RegistryChampions:
    """Read-only access to what an alias points at (for `skewgate verify` and the compare step)."""

    def __init__(self, uri: str) -> None:
        from mlflow import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)

    def fetch(self, name: str, alias: str, workdir: Path) -> Champion | None:
        found = download_alias(self.client, self.uri, name, alias, workdir / "model")
        if found is None:
            return None
        version, tags, model_dir = found
        attestation_uri = tags.get("skewgate.attestation.uri")
        attestations = _download(self.uri, attestation_uri, workdir / "attestations") if attestation_uri else None
        return Champion(version, tags, model_dir, attestations)


def download_alias(client: MlflowClient, uri: str, name: str, alias: str, directory: Path
                   ) -> tuple[str, dict[str, str], Path] | None:
    """The version `alias` points at: its number, its tags and its artifacts downloaded into `directory`; None
    when there is no such alias. Downloaded from the version's own artifact location, not `models:/…`, which
    mlflow resolves against its process-wide registry URI (which need not be this one)."""
    found = _or_none(uri, lambda: client.get_model_version_by_alias(name, alias))
    if found is None:
        return None
    version = str(found.version)
    source = _or_none(uri, lambda: client.get_model_version_download_uri(name, version))
    return version, dict(found.tags), _download(uri, str(source), directory)


def _download(tracking_uri: str, artifact_uri: str, directory: Path) -> Path:
    import mlflow.artifacts

    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=artifact_uri, dst_path=str(directory),
                                                        tracking_uri=tracking_uri))
    except Exception as err:
        raise BackendError(f"MLflow at {tracking_uri}: cannot download {artifact_uri}: {err}") from err


def read_promotion_log(tracking: Tracking) -> list[dict[str, Any]]:
    """Every promotion record of the experiment, oldest first."""
    query = f"tags.`{PROMOTION_LOG_TAG}` = 'promotion-log'"

    def read() -> list[dict[str, Any]]:
        found = tracking.client.search_runs([tracking.experiment_id], query, max_results=50)
        records = []
        with tempfile.TemporaryDirectory() as tmp:
            for run in found:
                for item in tracking.client.list_artifacts(run.info.run_id, PROMOTION_LOG_DIR):
                    local = tracking.client.download_artifacts(run.info.run_id, item.path, tmp)
                    records.append(json.loads(Path(local).read_text(encoding="utf-8")))
        return sorted(records, key=lambda r: str(r.get("at")))

    result: list[dict[str, Any]] = tracking._call(read)
    return result


def onnx_signature(model: Any) -> Any:
    """An MLflow tensor signature from the ONNX graph's inputs and outputs (symbolic dimensions → -1)."""
    import onnx
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    initializers = {init.name for init in model.graph.initializer}

    def spec(value: Any) -> TensorSpec:
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        return TensorSpec(dtype, shape, value.name)

    return ModelSignature(inputs=Schema([spec(v) for v in model.graph.input if v.name not in initializers]),
                          outputs=Schema([spec(v) for v in model.graph.output]))


def _pinned_requirements() -> list[str]:
    from importlib import metadata

    return [f"{dist}=={metadata.version(dist)}" for dist in ("onnx", "onnxruntime", "numpy")]


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


@dataclass(frozen=True)
class RegisteredOnnx:
    """The ONNX file of one registered version, downloaded and matched to the digest promote recorded."""

    name: str
    version: str
    alias: str
    path: Path
    sha256: str
    tags: Mapping[str, str]


def fetch_registered_onnx(tracking: Tracking, name: str, alias: str, directory: Path) -> RegisteredOnnx | None:
    """Download the version `alias` points at and return its ONNX file; None when there is no such alias.

    The file is found by digest, not by name: the version's artifacts are searched for the file whose SHA-256
    equals its `skewgate.onnx_sha256` tag, so a bare `onnx/<file>` folder (a KFP output has no suffix) and an
    MLflow Model directory (`MLmodel` + `model.onnx`) both work. A version whose files do not match its evidence
    is an `InputError`: nothing downloaded from the registry is trusted without it.
    """
    from skewgate.common.io import sha256_file

    found = download_alias(tracking.client, tracking.uri, name, alias, directory)
    if found is None:
        return None
    version, tags, local = found
    where = f"models:/{name}/{version}"
    expected = tags.get("skewgate.onnx_sha256")
    if not expected:
        raise InputError(where, field="skewgate.onnx_sha256", expected="the SHA-256 tag promote writes",
                         found="no such tag")
    candidates = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]
    digests = {path: sha256_file(path) for path in candidates}
    for path, digest in digests.items():
        if digest == expected:
            return RegisteredOnnx(name=name, version=version, alias=alias, path=path, sha256=digest, tags=tags)
    listing = ", ".join(f"{p.relative_to(local) if p != local else p.name} sha256 {d}" for p, d in digests.items())
    raise InputError(where, field="skewgate.onnx_sha256", expected=f"a file with sha256 {expected}",
                     found=listing or "no file in the version's artifacts")
