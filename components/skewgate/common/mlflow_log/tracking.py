"""Tracking: the experiment (`connect`), the parent run of a pipeline run and its step runs (`Tracking`, `StepRun`:
settings, datasets, verdicts, tables, artifacts), a pipeline run ended with its outcome (`finish_pipeline_run`),
and nightly drift as a series over nights (`log_drift_night`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError, Rejected
from skewgate.common.markdown import escape
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from skewgate.common.outcome import Outcome
from skewgate.common.mlflow_log._client import _experiment_id, _mapped, http_defaults, require_store, retry_until

log = logging.getLogger(__name__)
TRANSFER_RATE = 1 << 20  # bytes a second an upload is allowed at the least, beyond the call deadline


@dataclass
class Tracking:
    """A connection to one MLflow tracking server/store and one experiment. Build it with `connect`."""

    uri: str
    experiment_id: str
    client: MlflowClient = field(repr=False)
    # each call to a tracking *server* ends within this (plus time to move its bytes at TRANSFER_RATE); None:
    # unbounded (a local store, which cannot hold a call the way a server sending one byte at a time does)
    call_deadline_s: float | None = None

    def mapped(self, what: str, *, moving: int = 0) -> contextlib.AbstractContextManager[None]:
        """MLflow's exceptions while doing `what` as `Unreachable` / `Rejected` naming this server, within the
        call deadline; `moving`: the bytes the call uploads, which add their transfer time to it."""
        deadline = None if self.call_deadline_s is None else self.call_deadline_s + moving / TRANSFER_RATE
        return _mapped(self.uri, what, deadline_s=deadline)

    @contextlib.contextmanager
    def step_run(self, step: str, *, pipeline_run_id: str | None) -> Iterator[StepRun]:
        """A nested run for `step` under the pipeline's parent run; ended FINISHED when the verdict it logged
        passed (`pass`/`warn`, or none was logged), FAILED when it failed or errored, and on exception.

        Without a pipeline run id (an ad-hoc CLI call) the step's run is the call's only run, top-level: it ends
        like a pipeline's parent run, named after what it judged and tagged with the outcome (one invocation, one
        run; `--pipeline-run-id` groups several under one parent)."""
        from skewgate.common.outcome import step_outcome

        tags = {conv.STEP_TAG: step, conv.PIPELINE_RUN_TAG: pipeline_run_id or ""}
        tags |= ({"mlflow.parentRunId": self.parent_run(pipeline_run_id)} if pipeline_run_id
                 else {conv.ROLE_TAG: "pipeline"})
        with self.mapped(f"create the {step} run"):
            run = self.client.create_run(self.experiment_id, run_name=step, tags=tags)
        status = "FAILED"
        step_run = StepRun(self, run.info.run_id, step)
        error = ""
        try:
            yield step_run
            status = conv.run_status(step_run.verdict.status if step_run.verdict is not None else None)
        except BaseException as err:
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            # never mask the real error with a cleanup error
            with contextlib.suppress(Exception):
                if pipeline_run_id:
                    with self.mapped(f"end the {step} run"):
                        self.client.set_terminated(run.info.run_id, status=status)
                else:  # the call's only run ends as a parent run does (finish_run bounds its own calls)
                    self.finish_run(run.info.run_id, step_outcome(step_run.verdict, error=error))

    def find_parent_run(self, pipeline_run_id: str) -> str | None:
        """The parent run of this pipeline run, if one exists."""
        if not conv.RUN_ID_PATTERN.fullmatch(pipeline_run_id):
            raise InputError("--pipeline-run-id", expected=f"a run id matching {conv.RUN_ID_PATTERN.pattern}",
                             found=repr(pipeline_run_id))
        with self.mapped(f"find the parent run of {pipeline_run_id}"):
            found = self.client.search_runs(
                [self.experiment_id], f"tags.`{conv.PIPELINE_RUN_TAG}` = '{pipeline_run_id}' "
                "and tags.`skewgate.role` = 'pipeline'", max_results=1)
        return str(found[0].info.run_id) if found else None

    def parent_run(self, pipeline_run_id: str) -> str:
        """Find the parent run of this pipeline run, or create it."""
        found = self.find_parent_run(pipeline_run_id)
        if found:
            return found
        name = f"pipeline-{pipeline_run_id}"
        with self.mapped(f"create the parent run {name}"):
            run = self.client.create_run(self.experiment_id, run_name=name, tags={
                conv.PIPELINE_RUN_TAG: pipeline_run_id, conv.ROLE_TAG: "pipeline"})
        return str(run.info.run_id)

    def run_verdicts(self, parent_run_id: str) -> dict[str, Verdict]:
        """The verdicts the step runs under `parent_run_id` logged, by step (a step that logged none is absent).
        A logged verdict that does not parse is an `InputError` naming it, not a server failure."""
        verdicts = {}
        with self.mapped(f"read the verdicts of run {parent_run_id}"), tempfile.TemporaryDirectory() as tmp:
            children = self.client.search_runs([self.experiment_id],
                                               f"tags.`mlflow.parentRunId` = '{parent_run_id}'")
            for child in sorted(children, key=lambda r: r.info.start_time):
                step = child.data.tags.get(conv.STEP_TAG, "")
                name = f"{step}.verdict.json"
                if any(f.path == name for f in self.client.list_artifacts(child.info.run_id)):
                    verdicts[step] = Verdict.read(self.client.download_artifacts(child.info.run_id, name, tmp))
        return verdicts

    def finish_run(self, run_id: str, outcome: Outcome) -> None:
        """End a parent run (or an ad-hoc call's only run) with its outcome: FINISHED when it succeeded, FAILED
        otherwise; tags for the outcome, the digest and the reason (also the run's description, unless a step's
        verdict already wrote a fuller one there), and the summary metrics."""
        from mlflow.entities import Metric, RunTag

        tags = {conv.OUTCOME_TAG: outcome.label, conv.REASON_TAG: outcome.reason[:5000],
                conv.NOTE_TAG: f"**{outcome.label}**: {escape(outcome.reason)}"[:5000], **outcome.tags}
        if outcome.digest:
            tags[conv.CANDIDATE_SHA_TAG] = outcome.digest
        now = int(time.time() * 1000)
        with self.mapped(f"end run {run_id} ({outcome.label})"):
            run = self.client.get_run(run_id)
            if conv.NOTE_TAG in run.data.tags:  # the step's own description: its failed checks, whole
                del tags[conv.NOTE_TAG]
            # named after what it judged and how that ended (`model.pt2 · blocked`); before any verdict named the
            # candidate, after the name it was created with (`pipeline-<id> · error`)
            fallback = run.info.run_name or run_id
            tags[conv.RUN_NAME_TAG] = conv.parent_run_name(outcome.candidate, outcome.label, fallback=fallback)
            self.client.log_batch(run_id, metrics=[Metric(conv.metric_key(k), v, now, 0)
                                                   for k, v in outcome.metrics.items()],
                                  tags=[RunTag(k, v) for k, v in tags.items()])
            self.client.set_terminated(run_id, status="FINISHED" if outcome.succeeded else "FAILED")

    def pipeline_verdicts(self, *, since_ms: int) -> tuple[str | None, dict[str, Verdict]]:
        """The newest pipeline parent run started at or after `since_ms`, and its steps' verdicts."""
        with self.mapped("find the newest pipeline run"):
            parents = self.client.search_runs(
                [self.experiment_id], f"tags.`skewgate.role` = 'pipeline' and attributes.start_time >= {since_ms}",
                order_by=["attributes.start_time DESC"], max_results=1)
        if not parents:
            return None, {}
        parent = str(parents[0].info.run_id)
        return parent, self.run_verdicts(parent)


@dataclass
class StepRun:
    tracking: Tracking
    run_id: str
    step: str
    verdict: Verdict | None = None  # the last one logged: the run (and an ad-hoc call's parent) ends with its status
    # the step's inputs by the names its verdict gives their digests (`subject.data`): where each was read
    input_paths: dict[str, str] = field(default_factory=dict)

    def log_settings(self, settings: Any) -> dict[str, str]:
        """The step's settings (its options dataclass, flattened: `conv.params`) as the run's params; returns
        what was logged. Descriptive, not evidence: a store that refuses them is logged, the step goes on."""
        from mlflow.entities import Param

        logged = conv.params(settings)
        items = [Param(k, v) for k, v in logged.items()]
        try:
            with self.tracking.mapped(f"log the {self.step} settings"):
                for start in range(0, len(items), conv.PARAMS_BATCH_LIMIT):
                    self.tracking.client.log_batch(self.run_id, params=items[start:start + conv.PARAMS_BATCH_LIMIT])
        except Rejected as err:
            log.warning("%s: settings not logged as params: %s", self.step, err)
        return logged

    def log_datasets(self, refs: list[conv.DatasetRef]) -> None:
        """Each input as an MLflow dataset of the run: metadata only, nothing read or uploaded (what
        `mlflow.data.meta_dataset.MetaDataset` over a `LocalArtifactDatasetSource` logs: source type `local`, its
        path or URI; `http` for a URL), its digest the SHA-256's first characters, the full SHA-256 in its profile
        and, with its role, as input tags. Descriptive like the params: a refusal is logged, the step goes on."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        inputs = []
        for ref in refs:
            web = ref.source.startswith(("http://", "https://"))
            dataset = Dataset(name=ref.name, digest=ref.digest, source_type="http" if web else "local",
                              source=json.dumps({"url": ref.source} if web else {"uri": ref.source}),
                              profile=json.dumps({"sha256": ref.sha256}))
            inputs.append(DatasetInput(dataset, tags=[InputTag(conv.DATASET_CONTEXT_TAG, ref.context),
                                                      InputTag(conv.DATASET_SHA256_TAG, ref.sha256)]))
        if not inputs:
            return
        try:
            with self.tracking.mapped(f"log the {self.step} inputs"):
                self.tracking.client.log_inputs(self.run_id, datasets=inputs)
        except Rejected as err:
            log.warning("%s: inputs not logged as datasets: %s", self.step, err)

    def log_verdict(self, verdict: Verdict, *, envelope: Mapping[str, Any] | None = None) -> None:
        """Metrics `<step>.<check>` (value, or 1/0 for passed when a check has no value), status tags, the
        verdict JSON and its digest (promote matches a pipeline's verdicts against it), its signed envelope when
        there is one, and the checks and tensor statistics as MLflow tables."""
        from skewgate.common.attest import ENVELOPE_SUFFIX, envelope_bytes

        client = self.tracking.client
        with self.tracking.mapped(f"log the {self.step} verdict"), tempfile.TemporaryDirectory() as tmp:
            for key, value in conv.step_metrics(self.step, verdict).items():
                client.log_metric(self.run_id, key, value)
            for key, text in conv.step_tags(verdict).items():
                client.set_tag(self.run_id, key, text)
            client.log_artifact(self.run_id, str(verdict.write(Path(tmp) / f"{self.step}.verdict.json")))
            if envelope is not None:
                signed = Path(tmp) / f"{self.step}.verdict{ENVELOPE_SUFFIX}"
                signed.write_bytes(envelope_bytes(envelope))
                client.log_artifact(self.run_id, str(signed))
        self.verdict = verdict
        self.log_datasets(conv.verdict_datasets(verdict, self.input_paths))
        self.log_table("checks.json", conv.check_rows(verdict))
        self.log_table("tensor_stats.json", [{**vars(s), "shape": list(s.shape)} for s in verdict.stats])

    def log_table(self, artifact_file: str, rows: list[dict[str, Any]]) -> None:
        """Rows of one shape as an MLflow table (viewable in the run's Artifacts tab)."""
        if rows:
            with self.tracking.mapped(f"log table {artifact_file}"):
                self.tracking.client.log_table(self.run_id, data=conv.table_columns(rows),
                                               artifact_file=artifact_file)

    def log_artifact_as(self, source: str | Path, name: str, artifact_path: str | None = None) -> str:
        """Upload `source` under another file name (KFP output paths have no suffix: a heatmap must be `.png`)."""
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / name
            target.write_bytes(Path(source).read_bytes())
            return self.log_artifact(target, artifact_path)

    def log_artifacts(self, directory: str | Path, artifact_path: str) -> str:
        """Upload a folder's files under `artifact_path`; returns that folder's artifact URI."""
        size = sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())
        with self.tracking.mapped(f"upload {directory} to {artifact_path}", moving=size):
            self.tracking.client.log_artifacts(self.run_id, str(directory), artifact_path)
        return f"{self.artifact_uri()}/{artifact_path}"

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> str:
        """Upload a file; returns the artifact URI of the folder it went to."""
        with self.tracking.mapped(f"upload {path}", moving=Path(path).stat().st_size):
            self.tracking.client.log_artifact(self.run_id, str(path), artifact_path)
        base = self.artifact_uri()
        return f"{base}/{artifact_path}" if artifact_path else base

    def artifact_uri(self) -> str:
        with self.tracking.mapped(f"read run {self.run_id}"):
            return str(self.tracking.client.get_run(self.run_id).info.artifact_uri)


def finish_pipeline_run(tracking: Tracking, pipeline_run_id: str, *, pipeline: str, final_state: str = "",
                        final_error: str = "") -> Outcome:
    """End the parent run of `pipeline_run_id` with the outcome its steps' verdicts add up to (the pipeline's exit
    handler calls this). A run whose steps never reached MLflow gets a parent run here, ended FAILED."""
    from skewgate.common.outcome import pipeline_outcome

    parent = tracking.parent_run(pipeline_run_id)
    verdicts = tracking.run_verdicts(parent)
    outcome = pipeline_outcome(pipeline, verdicts, final_state=final_state, final_error=final_error)
    outcome = dataclasses.replace(outcome, tags={**outcome.tags, conv.PIPELINE_TAG: pipeline})
    if "nightly-drift" in verdicts:
        log_drift_night(tracking, verdicts["nightly-drift"], run_ids=[parent])
    if "nightly-estimate" in verdicts and verdicts["nightly-estimate"].status != "error":
        log_night(tracking, verdicts["nightly-estimate"], conv.estimate_statistics(verdicts["nightly-estimate"]),
                  run_ids=[parent])
    tracking.finish_run(parent, outcome)
    return outcome


def log_drift_night(tracking: Tracking, verdict: Verdict, *, run_ids: list[str]) -> None:
    """Log a nightly drift verdict's statistics as one point of a series (`log_night`)."""
    log_night(tracking, verdict, conv.drift_statistics(verdict), run_ids=run_ids)


def log_night(tracking: Tracking, verdict: Verdict, statistics: Mapping[str, float], *, run_ids: list[str]) -> None:
    """Log a nightly verdict's `statistics` as one point of a series, at its night (`conv.drift_night`). They go
    to `run_ids` and to the experiment's `drift-history` run, whose charts in the MLflow UI then draw every
    statistic across nights (each nightly run is its own run, and MLflow draws a line only within one run)."""
    from mlflow.entities import Metric

    timestamp, night = conv.drift_night(verdict)
    metrics = [Metric(conv.metric_key(k), v, timestamp, night) for k, v in statistics.items()]
    client = tracking.client
    with tracking.mapped("log the night's drift statistics"):
        # the oldest: two first nights at the same moment may each create one; later nights then share one
        history = client.search_runs([tracking.experiment_id],
                                     f"tags.`{conv.PROMOTION_LOG_TAG}` = '{conv.DRIFT_HISTORY_TAG}'", max_results=1,
                                     order_by=["attributes.start_time ASC"])
        if history:
            history_id = history[0].info.run_id
        else:  # ended at once: MLflow accepts metrics on a finished run, and no skewgate run stays RUNNING
            history_id = client.create_run(tracking.experiment_id, run_name="drift-history",
                                           tags={conv.PROMOTION_LOG_TAG: conv.DRIFT_HISTORY_TAG}).info.run_id
            client.set_terminated(history_id, status="FINISHED")
        for run_id in [*run_ids, history_id]:
            for start in range(0, len(metrics), conv.MLFLOW_BATCH_LIMIT):
                client.log_batch(run_id, metrics=metrics[start:start + conv.MLFLOW_BATCH_LIMIT])


def runs_table_link(ui: str, experiment_id: str) -> str:
    """The MLflow UI address (`ui`: e.g. http://127.0.0.1:5000) that opens this experiment's runs table, filtered
    to the candidates' runs (`conv.CANDIDATE_RUNS_FILTER`: the bookkeeping runs hidden)."""
    from urllib.parse import quote

    return (f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&searchFilter={quote(conv.CANDIDATE_RUNS_FILTER, safe='')}")


def connect(uri: str, *, experiment: str, deadline_s: float = 30.0) -> Tracking:
    """Connect, retrying with backoff until `deadline_s` (`retry_until`); then `Unreachable` naming the URI (the
    CLI exits 2). A refusal that waiting cannot change (authentication, permission) is a `Rejected` at once. A local
    store that does not exist is an `InputError` (`require_store`): no step creates one."""
    require_store(uri)
    http_defaults()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    server = uri.lower().startswith(("http://", "https://"))
    return retry_until(uri, deadline_s, lambda: Tracking(
        uri=uri, experiment_id=_experiment_id(client, uri, experiment), client=client,
        call_deadline_s=deadline_s if server else None))
