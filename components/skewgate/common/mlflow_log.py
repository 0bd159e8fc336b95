"""Everything skewgate says to MLflow: tracking (parent run per pipeline run, ended with the run's outcome by
`finish_pipeline_run`; nested run per step; nightly drift as a series over nights) and the model registry
(versions, evidence tags, aliases, the promotion log). The only module that imports mlflow; what is written, by
name and shape, is in `mlflow_conventions` (pure).

Conventions (DESIGN.md): one experiment per registered model; metrics are `<step>.<check>`; the verdict JSON
and the tensor-stats table are artifacts of the step run. Works the same against `sqlite:///…` (the embedded
default) and a remote server (`MLFLOW_TRACKING_URI`, basic auth via `MLFLOW_TRACKING_USERNAME/PASSWORD`).

Errors: every call into mlflow runs inside `map_errors` (via `Tracking.mapped` / `_mapped`), so a server that
cannot be reached is `Unreachable`, a refusal is `Rejected` (with MLflow's error code, which the few callers that
expect one — "already exists", "does not exist" — test), an answer that contradicts a write is `Inconsistent`,
and skewgate's own errors (a logged verdict that does not parse: `InputError`) pass through unchanged.
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import BackendError, Inconsistent, InputError, Rejected, Unreachable, map_errors
from skewgate.common.steps import DEFAULT_ALIAS
from skewgate.common.strict_json import SHA256_HEX
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from skewgate.common.outcome import Outcome

log = logging.getLogger(__name__)
T = TypeVar("T")
# MLflow answers a lookup of something that is not there with one of these codes, depending on the store.
_MISSING = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"})
# Refusals that waiting cannot change: `connect` gives up at once instead of retrying until its deadline.
_FINAL_REFUSALS = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "CUSTOMER_UNAUTHORIZED", "401", "403"})


def _mapped(uri: str, what: str) -> contextlib.AbstractContextManager[None]:
    return map_errors(f"MLflow at {uri}", what)


def _or_none(uri: str, what: str, lookup: Callable[[], T], *, missing: frozenset[str] = _MISSING) -> T | None:
    """`lookup()`, or None when MLflow says the thing does not exist; any other failure stays mapped."""
    try:
        with _mapped(uri, what):
            return lookup()
    except Rejected as err:
        if err.code in missing:
            return None
        raise


@dataclass
class Tracking:
    """A connection to one MLflow tracking server/store and one experiment. Build it with `connect`."""

    uri: str
    experiment_id: str
    client: MlflowClient = field(repr=False)

    def mapped(self, what: str) -> contextlib.AbstractContextManager[None]:
        """MLflow's exceptions while doing `what` as `Unreachable` / `Rejected` naming this server."""
        return _mapped(self.uri, what)

    @contextlib.contextmanager
    def step_run(self, step: str, *, pipeline_run_id: str | None) -> Iterator[StepRun]:
        """A nested run for `step` under the pipeline's parent run; ended FINISHED when the verdict it logged
        passed (`pass`/`warn`, or none was logged), FAILED when it failed or errored, and on exception.

        Without a pipeline run id (an ad-hoc CLI call) the parent run is this call's own, and it ends with the
        step: FINISHED for pass/warn, FAILED otherwise, tagged with the outcome like a pipeline's parent run."""
        from skewgate.common.outcome import step_outcome

        parent = self.parent_run(pipeline_run_id)
        with self.mapped(f"create the {step} run"):
            run = self.client.create_run(self.experiment_id, run_name=step, tags={
                "mlflow.parentRunId": parent, conv.STEP_TAG: step, conv.PIPELINE_RUN_TAG: pipeline_run_id or ""})
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
            with contextlib.suppress(Exception):  # never mask the real error with a cleanup error
                self.client.set_terminated(run.info.run_id, status=status)
            if not pipeline_run_id:
                with contextlib.suppress(Exception):
                    self.finish_run(parent, step_outcome(step_run.verdict, error=error))

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

    def parent_run(self, pipeline_run_id: str | None) -> str:
        """Find the parent run of this pipeline run, or create it (an ad-hoc CLI call gets a fresh one)."""
        if pipeline_run_id:
            found = self.find_parent_run(pipeline_run_id)
            if found:
                return found
        name = f"pipeline-{pipeline_run_id}" if pipeline_run_id else "skewgate-cli"
        with self.mapped(f"create the parent run {name}"):
            run = self.client.create_run(self.experiment_id, run_name=name, tags={
                conv.PIPELINE_RUN_TAG: pipeline_run_id or "", conv.ROLE_TAG: "pipeline"})
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
        """End a parent run with its outcome: FINISHED when it succeeded, FAILED otherwise; tags for the outcome,
        the digest and the reason (also the run's description), and the summary metrics."""
        from mlflow.entities import Metric, RunTag

        tags = {conv.OUTCOME_TAG: outcome.label, conv.REASON_TAG: outcome.reason[:5000],
                "mlflow.note.content": f"**{outcome.label}**: {outcome.reason}"[:5000], **outcome.tags}
        if outcome.digest:
            tags[conv.CANDIDATE_SHA_TAG] = outcome.digest
        now = int(time.time() * 1000)
        with self.mapped(f"end run {run_id} ({outcome.label})"):
            # named after what it judged and how that ended (`model.pt2 · blocked`); before any verdict named the
            # candidate, after the name it was created with (`pipeline-<id> · error`)
            fallback = self.client.get_run(run_id).info.run_name or run_id
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
        with self.tracking.mapped(f"upload {directory} to {artifact_path}"):
            self.tracking.client.log_artifacts(self.run_id, str(directory), artifact_path)
        return f"{self.artifact_uri()}/{artifact_path}"

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> str:
        """Upload a file; returns the artifact URI of the folder it went to."""
        with self.tracking.mapped(f"upload {path}"):
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
    tracking.finish_run(parent, outcome)
    return outcome


def log_drift_night(tracking: Tracking, verdict: Verdict, *, run_ids: list[str]) -> None:
    """Log a nightly drift verdict's statistics as one point of a series (`conv.drift_night`). They go to
    `run_ids` and to the experiment's `drift-history` run, whose charts in the MLflow UI then draw every
    statistic across nights (each nightly run is its own run, and MLflow draws a line only within one run)."""
    from mlflow.entities import Metric

    timestamp, night = conv.drift_night(verdict)
    metrics = [Metric(conv.metric_key(k), v, timestamp, night) for k, v in conv.drift_statistics(verdict).items()]
    client = tracking.client
    with tracking.mapped("log the night's drift statistics"):
        history = client.search_runs([tracking.experiment_id],
                                     f"tags.`{conv.PROMOTION_LOG_TAG}` = '{conv.DRIFT_HISTORY_TAG}'", max_results=1)
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
    """The MLflow UI address (`ui`: e.g. http://127.0.0.1:5000) that opens this experiment's runs table."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def connect(uri: str, *, experiment: str, deadline_s: float = 30.0) -> Tracking:
    """Connect, retrying with backoff until `deadline_s` (`retry_until`); then `Unreachable` naming the URI (the
    CLI exits 2). A refusal that waiting cannot change (authentication, permission) is a `Rejected` at once."""
    http_defaults()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    return retry_until(uri, deadline_s, lambda: Tracking(
        uri=uri, experiment_id=_experiment_id(client, uri, experiment), client=client))


def http_defaults() -> None:
    """MLflow's own HTTP retries would wait minutes on a dead server (7 retries with backoff, 120 s a request):
    skewgate owns the deadline instead (`retry_until`). Values the user set in the environment stay."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault(_TIMEOUT_ENV, "10")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # no "creating tables" chatter on stderr


_TIMEOUT_ENV = "MLFLOW_HTTP_REQUEST_TIMEOUT"


def retry_until(uri: str, deadline_s: float, attempt: Callable[[], T]) -> T:
    """`attempt()`, retried with backoff (0.5 s doubling to 5 s) while MLflow at `uri` fails, until `deadline_s`
    has passed; then the last failure (`Unreachable` says for how long). A refusal that waiting cannot change
    (authentication, permission) is raised at once. Each attempt's HTTP requests time out within what is left of
    the deadline (at least 1 s): a server that accepts and never answers cannot hold a call far past it."""
    deadline = time.monotonic() + deadline_s
    delay = 0.5
    while True:
        try:
            with _request_timeout(deadline):
                return attempt()
        except BackendError as err:
            if isinstance(err, Rejected) and err.code in _FINAL_REFUSALS:
                raise
            if time.monotonic() + delay > deadline:
                if isinstance(err, Unreachable):
                    cause = err.__cause__ or err
                    raise Unreachable(f"MLflow at {uri} unreachable for {deadline_s:.0f}s: "
                                      f"{type(cause).__name__}: {cause}") from err
                raise
            log.warning("MLflow at %s not reachable (%s); retrying in %.1fs", uri, type(err).__name__, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


@contextlib.contextmanager
def _request_timeout(deadline: float) -> Iterator[None]:
    """MLflow's per-request timeout (read from the environment on every request), cut to the time left before
    `deadline` while the block runs, then restored."""
    previous = os.environ.get(_TIMEOUT_ENV)
    try:
        configured: int | None = int(previous or "10")
    except ValueError:  # not ours to judge: MLflow reports its own setting
        configured = None
    if configured is not None:
        os.environ[_TIMEOUT_ENV] = str(min(configured, max(1, math.ceil(deadline - time.monotonic()))))
    try:
        yield
    finally:
        if configured is not None:
            if previous is None:
                os.environ.pop(_TIMEOUT_ENV, None)
            else:
                os.environ[_TIMEOUT_ENV] = previous


def _experiment_id(client: MlflowClient, uri: str, name: str) -> str:
    """The experiment's id, created (tagged with its kind) when missing; an older one gets the kind tag."""
    with _mapped(uri, f"look up experiment {name!r}"):
        found = client.get_experiment_by_name(name)
    if found is None:
        location = None
        if uri.startswith("sqlite:///"):
            # Keep artifacts beside the embedded store instead of in ./mlruns of whatever the cwd is.
            location = (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").resolve().as_uri()
        try:
            with _mapped(uri, f"create experiment {name!r}"):
                return str(client.create_experiment(name, artifact_location=location,
                                                    tags={conv.EXPERIMENT_KIND_TAG: conv.EXPERIMENT_KIND}))
        except Rejected as err:
            if err.code != "RESOURCE_ALREADY_EXISTS":  # another step created it meanwhile
                raise
        with _mapped(uri, f"look up experiment {name!r}"):
            found = client.get_experiment_by_name(name)
        if found is None:
            raise Inconsistent(f"MLflow at {uri}: experiment {name!r} already exists, yet is not found by name")
    if conv.EXPERIMENT_KIND_TAG not in found.tags:  # made before skewgate tagged it
        with _mapped(uri, f"tag experiment {name!r}"):
            client.set_experiment_tag(found.experiment_id, conv.EXPERIMENT_KIND_TAG, conv.EXPERIMENT_KIND)
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
        self.tracking = step_run.tracking
        self.client = step_run.tracking.client
        self.input_example = dict(input_example) if input_example else None
        self._alias = ""

    def model_exists(self, name: str) -> bool:
        found = _or_none(self.tracking.uri, f"look up model {name!r}", lambda: self.client.get_registered_model(name),
                         missing=frozenset({"RESOURCE_DOES_NOT_EXIST"}))
        return found is not None

    def version_exists(self, name: str, version: str) -> bool:
        return _or_none(self.tracking.uri, f"look up {name!r} v{version}",
                        lambda: self.client.get_model_version(name, version)) is not None

    def find_version(self, name: str, sha256: str) -> str | None:
        """The lowest version of `name` registered for this digest (there is one unless a race is under way)."""
        if not SHA256_HEX.fullmatch(sha256):
            raise InputError("onnx", field="sha256", expected="64 lowercase hex digits", found=sha256)
        with self.tracking.mapped(f"find the version of sha256 {sha256}"):
            found = self.client.search_model_versions(f"tags.`{conv.ONNX_DIGEST_TAG}` = '{sha256}'",
                                                      max_results=10000)
        versions = sorted(int(v.version) for v in found if v.name == name)
        return str(versions[0]) if versions else None

    def register(self, name: str, artifact: Path, sha256: str, *, artifact_path: str = "model") -> str:
        """Register the ONNX as an MLflow Model version. Concurrent promotions of one file may each get this
        far: every one of them then keeps the lowest version and deletes its own duplicate, so exactly one
        version carries the digest."""
        try:
            with self.tracking.mapped(f"create registered model {name!r}"):
                self.client.create_registered_model(name)
        except Rejected as err:
            if err.code != "RESOURCE_ALREADY_EXISTS":  # a concurrent promote may have created it
                raise
        source = self.log_onnx_model(artifact, sha256, artifact_path)
        with self.tracking.mapped(f"create a version of {name!r}"):
            created = self.client.create_model_version(name, source=source, run_id=self.run.run_id,
                                                       tags={conv.ONNX_DIGEST_TAG: sha256})
        mine = str(created.version)
        winner = self.find_version(name, sha256) or mine
        if winner != mine:
            log.info("%s: version %s already holds sha256 %s; dropping duplicate v%s", name, winner, sha256, mine)
            with self.tracking.mapped(f"delete duplicate {name!r} v{mine}"):
                self.client.delete_model_version(name, mine)
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
            # save_model re-serialises the proto (tensors of 1 KiB or more into an external-data file beside
            # it); the registry must hold the judged bytes themselves, and no model file they do not load
            written = onnx_external_data(target / "model.onnx")
            shutil.copyfile(artifact, target / "model.onnx")
            for location in written - onnx_external_data(target / "model.onnx"):
                if (target / location).resolve().parent == target.resolve():
                    (target / location).unlink(missing_ok=True)
            if sha256_file(target / "model.onnx") != sha256:
                raise InputError(artifact, expected=f"the judged file (sha256 {sha256})",
                                 found="other bytes: it changed while it was being registered")
            return self.run.log_artifacts(target, artifact_path)

    def get_tags(self, name: str, version: str) -> dict[str, str]:
        with self.tracking.mapped(f"read the tags of {name!r} v{version}"):
            return dict(self.client.get_model_version(name, version).tags)

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None:
        with self.tracking.mapped(f"tag {name!r} v{version}"):
            for key, value in tags.items():
                self.client.set_model_version_tag(name, version, key, value)

    def get_alias(self, name: str, alias: str) -> str | None:
        return alias_version(self.tracking, name, alias)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        with self.tracking.mapped(f"move alias {alias!r} of {name!r} to v{version}"):
            self.client.set_registered_model_alias(name, alias, version)

    def set_description(self, name: str, version: str, markdown: str) -> None:
        """The version's description, with links to the pipeline's parent run and to this promote run in the
        MLflow UI; and the registered model's (`conv.model_description`) when it has none — a description
        someone wrote is never replaced."""
        with self.tracking.mapped(f"describe {name!r} v{version}"):
            run = self.client.get_run(self.run.run_id)
            parent = run.data.tags.get("mlflow.parentRunId", self.run.run_id)
            self.client.update_model_version(name, version, description=conv.version_description(
                markdown, experiment_id=self.tracking.experiment_id, parent_run_id=parent,
                promote_run_id=self.run.run_id))
        with self.tracking.mapped(f"describe the registered model {name!r}"):
            if not (self.client.get_registered_model(name).description or "").strip():
                self.client.update_registered_model(name, description=conv.model_description(
                    name, self._alias or DEFAULT_ALIAS))

    def store_attestations(self, name: str, version: str, files: Mapping[str, bytes]) -> str:
        """The verdicts, their envelopes and promote's own, as artifacts of this promote run."""
        with tempfile.TemporaryDirectory() as tmp:
            for file_name, data in files.items():
                (Path(tmp) / file_name).write_bytes(data)
            return self.run.log_artifacts(tmp, f"attestations/v{version}")

    def logged_verdict_envelopes(self, pipeline_run_id: str) -> list[dict[str, Any]]:
        """Every verdict envelope (`<step>.verdict.intoto.jsonl`) logged by a run tagged with this pipeline run,
        unverified. Which run holds an envelope, and every tag, are unsigned and mean nothing: promote keeps only
        what a trusted key signed for this pipeline run. A file that is not a bounded DSSE envelope is skipped."""
        from skewgate.common import attest

        if not conv.RUN_ID_PATTERN.fullmatch(pipeline_run_id):
            raise InputError("--pipeline-run-id", expected=f"a run id matching {conv.RUN_ID_PATTERN.pattern}",
                             found=repr(pipeline_run_id))
        suffix = f".verdict{attest.ENVELOPE_SUFFIX}"
        envelopes: list[dict[str, Any]] = []
        query = f"tags.`{conv.PIPELINE_RUN_TAG}` = '{pipeline_run_id}'"
        with self.tracking.mapped(f"read the signed verdicts of pipeline run {pipeline_run_id}"), \
                tempfile.TemporaryDirectory() as tmp:
            runs, token = [], None
            for _ in range(10):  # 10,000 runs: far beyond any pipeline run's retries
                page = self.client.search_runs([self.tracking.experiment_id], query, max_results=1000,
                                               page_token=token)
                runs += list(page)
                token = page.token
                if not token:
                    break
            for index, run in enumerate(runs):
                for info in self.client.list_artifacts(run.info.run_id):
                    if info.is_dir or not info.path.endswith(suffix) or \
                            (info.file_size or 0) > attest.MAX_ENVELOPE_BYTES:
                        continue
                    target = Path(tmp) / str(index)
                    target.mkdir(exist_ok=True)
                    try:
                        envelopes.append(attest.read_envelope(
                            self.client.download_artifacts(run.info.run_id, info.path, str(target))))
                    except (attest.SignatureInvalid, InputError) as err:
                        log.debug("skipped %s of run %s: %s", info.path, run.info.run_id, err)
        return envelopes

    def download(self, artifact_uri: str, directory: Path) -> Path:
        """Fetch one artifact by URI (as recorded in a tag) into `directory`."""
        return _download(self.tracking.uri, artifact_uri, directory)

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        """One new JSON file per attempt (`promotions/<time>-<id>.json`) in the experiment's promotion-log run,
        and a copy in this promote run. Append-only by construction: no record is ever read back and
        rewritten, so concurrent promotions cannot lose each other's records."""
        file_name, data = conv.promotion_record(record)
        log_run = self._promotion_log_run(name)
        with tempfile.TemporaryDirectory() as tmp, self.tracking.mapped("append to the promotion log"):
            (Path(tmp) / file_name).write_bytes(data)
            for run_id in (log_run, self.run.run_id):
                self.client.log_artifact(run_id, str(Path(tmp) / file_name), conv.PROMOTION_LOG_DIR)

    def announce(self, name: str, alias: str) -> None:
        """Mark this promote run as a contender for `name@alias`, with the process that runs it."""
        self._alias = alias  # the registered model's description names it
        with self.tracking.mapped(f"announce the promotion to {name}@{alias}"):
            self.client.set_tag(self.run.run_id, PROMOTE_TARGET_TAG, _target(name, alias))
            self.client.set_tag(self.run.run_id, PROCESS_TAG, process_identity())

    def claim(self, name: str, alias: str, version: str) -> None:
        """The version this promote run is about to move `name@alias` to."""
        with self.tracking.mapped(f"claim {name}@{alias} for v{version}"):
            self.client.set_tag(self.run.run_id, PROMOTE_VERSION_TAG, version)

    def contenders(self, name: str, alias: str, version: str) -> list[str]:
        """The other promote runs of this experiment still under way (RUNNING, their process not known to be
        gone, started less than `STALE_RUN_AFTER_S` ago) that target `name@alias` — or have not said yet which
        target — and have not claimed this same version. Names are compared here, never put into a filter."""
        now_ms = time.time() * 1000
        with self.tracking.mapped(f"find promotions to {name}@{alias} under way"):
            runs = self.client.search_runs([self.tracking.experiment_id],
                                           "attributes.status = 'RUNNING' and tags.`skewgate.step` = 'promote'",
                                           max_results=1000)
        found = []
        for run in runs:
            tags = run.data.tags
            if run.info.run_id == self.run.run_id or tags.get(PROMOTE_VERSION_TAG) == version or \
                    tags.get(PROMOTE_TARGET_TAG, _target(name, alias)) != _target(name, alias) or \
                    process_gone(tags.get(PROCESS_TAG, "")) or \
                    now_ms - (run.info.start_time or 0) > STALE_RUN_AFTER_S * 1000:
                continue
            found.append(str(run.info.run_id))
        return found

    def _promotion_log_run(self, name: str) -> str:
        """The experiment's one promotion-log run (a FINISHED run that only holds records). Two promotions that
        both create one keep the oldest and delete the other before either writes a record into it."""
        experiment = self.tracking.experiment_id
        query = f"tags.`{conv.PROMOTION_LOG_TAG}` = '{conv.PROMOTION_LOG_KIND}'"
        with self.tracking.mapped("find the promotion-log run"):
            found = self.client.search_runs([experiment], query, max_results=50)
        if not found:
            with self.tracking.mapped("create the promotion-log run"):
                created = self.client.create_run(experiment, run_name=f"promotion-log:{name}",
                                                 tags={conv.PROMOTION_LOG_TAG: conv.PROMOTION_LOG_KIND})
                self.client.set_terminated(created.info.run_id, status="FINISHED")
                found = self.client.search_runs([experiment], query, max_results=50)
            if not found:
                raise Inconsistent(f"MLflow at {self.tracking.uri}: promotion-log run {created.info.run_id} was "
                                   "created, yet a search for it finds none")
        ordered = sorted(found, key=lambda r: (r.info.start_time, r.info.run_id))
        for duplicate in ordered[1:]:
            # another promotion may have deleted it already: what matters is that the oldest is kept
            with contextlib.suppress(BackendError), self.tracking.mapped("delete a duplicate promotion-log run"):
                self.client.delete_run(duplicate.info.run_id)
        return str(ordered[0].info.run_id)


PROMOTE_TARGET_TAG, PROMOTE_VERSION_TAG = conv.PROMOTE_TARGET_TAG, conv.PROMOTE_VERSION_TAG
PROCESS_TAG = conv.PROCESS_TAG
STALE_RUN_AFTER_S = 6 * 3600.0  # a RUNNING run this old whose process cannot be checked is taken as dead


def _target(name: str, alias: str) -> str:
    return f"{name}@{alias}"


def _process_stat(pid: int) -> tuple[str, str]:
    """(state, start time in clock ticks since boot) of a process (Linux /proc), ("", "") where unknown: with the
    pid, the start time tells a live process from a later one that reused its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "", ""
    fields = stat[stat.rfind(")") + 2:].split()
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


def process_identity() -> str:
    """`host:pid:start` of this process (`PROCESS_TAG`)."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{_process_stat(os.getpid())[1]}"


def process_gone(identity: str) -> bool:
    """Whether the process `process_identity()` named is known to have ended (or is a zombie): only a process of
    this host can be checked; another host's, or a malformed tag, is not known to be gone."""
    import socket

    parts = identity.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid, start = int(parts[1]), parts[2]
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, and someone else's
    except OSError:
        return False
    state, now = _process_stat(pid)
    return state in ("Z", "X") or (bool(start) and bool(now) and now != start)


def end_stale_runs(tracking: Tracking, *, current_run_id: str, pipeline_run_id: str = "",
                   older_than_s: float = STALE_RUN_AFTER_S) -> list[str]:
    """End as KILLED the RUNNING runs of this experiment left by a process that is gone: those whose
    `PROCESS_TAG` names a process of this host that has ended, and any other started more than `older_than_s`
    ago — never this run, its parent, nor a run of this pipeline run. An ad-hoc CLI call's parent run
    (no pipeline run id) ends with its killed step. Returns the run ids ended; a failure is only logged."""
    from mlflow.entities import RunTag

    ended: list[str] = []
    try:
        with tracking.mapped("find runs left RUNNING"):
            runs = tracking.client.search_runs([tracking.experiment_id], "attributes.status = 'RUNNING'",
                                               max_results=1000)
            by_id = {str(r.info.run_id): r for r in runs}
            mine = by_id.get(current_run_id)
            keep = {current_run_id, mine.data.tags.get("mlflow.parentRunId", "") if mine else ""}
            now_ms = time.time() * 1000
            for run_id, run in by_id.items():
                tags = run.data.tags
                if run_id in keep or (pipeline_run_id and tags.get(conv.PIPELINE_RUN_TAG) == pipeline_run_id):
                    continue
                gone = process_gone(tags.get(PROCESS_TAG, ""))
                if not gone and now_ms - (run.info.start_time or now_ms) <= older_than_s * 1000:
                    continue
                why = (f"process {tags[PROCESS_TAG]} is gone" if gone
                       else f"still RUNNING {older_than_s / 3600:g} h after it started")
                stale = [run_id]
                parent = by_id.get(tags.get("mlflow.parentRunId", ""))
                if parent is not None and not parent.data.tags.get(conv.PIPELINE_RUN_TAG) and \
                        str(parent.info.run_id) not in keep:
                    stale.append(str(parent.info.run_id))
                for stale_id in stale:
                    if stale_id in ended:
                        continue
                    tracking.client.log_batch(stale_id, tags=[RunTag(conv.ENDED_AS_STALE_TAG, why[:5000])])
                    tracking.client.set_terminated(stale_id, status="KILLED")
                    ended.append(stale_id)
                    log.info("ended run %s as KILLED: %s", stale_id, why)
    except BackendError as err:
        log.warning("runs left RUNNING not ended: %s", err)
    return ended


@dataclass(frozen=True)
class Champion:
    """A registered version as downloaded: its tags, its MLflow Model folder, and its stored attestations."""

    version: str
    tags: dict[str, str]
    model_dir: Path
    attestations_dir: Path | None  # `attestations/v<N>` of the promote run, when the version names one


class RegistryChampions:
    """Read-only access to what an alias points at (for `skewgate verify`). Under the deadline and retry policy of
    every step (`retry_until`): the first registry call is retried until `deadline_s`, each later one times out
    on its own; nothing is ever written (no experiment, no run)."""

    def __init__(self, uri: str, *, deadline_s: float = 30.0) -> None:
        http_defaults()
        from mlflow import MlflowClient

        self.uri = uri
        self.deadline_s = deadline_s
        self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)

    def fetch(self, name: str, alias: str, workdir: Path) -> Champion | None:
        found = retry_until(self.uri, self.deadline_s, lambda: _alias_version(self.client, self.uri, name, alias))
        if found is None:
            return None
        version, tags, model_dir = _download_version(self.client, self.uri, name, found, workdir / "model")
        attestation_uri = tags.get(conv.ATTESTATION_URI_TAG)
        attestations = _download(self.uri, attestation_uri, workdir / "attestations") if attestation_uri else None
        return Champion(version, tags, model_dir, attestations)


def download_alias(client: MlflowClient, uri: str, name: str, alias: str, directory: Path
                   ) -> tuple[str, dict[str, str], Path] | None:
    """The version `alias` points at: its number, its tags and its artifacts downloaded into `directory`; None
    when there is no such alias. Downloaded from the version's own artifact location, not `models:/…`, which
    mlflow resolves against its process-wide registry URI (which need not be this one)."""
    found = _alias_version(client, uri, name, alias)
    return None if found is None else _download_version(client, uri, name, found, directory)


def _alias_version(client: MlflowClient, uri: str, name: str, alias: str) -> Any:
    """The `ModelVersion` `alias` points at, or None when the model or the alias does not exist."""
    return _or_none(uri, f"look up {name}@{alias}", lambda: client.get_model_version_by_alias(name, alias))


def _download_version(client: MlflowClient, uri: str, name: str, found: Any, directory: Path
                      ) -> tuple[str, dict[str, str], Path]:
    version = str(found.version)
    with _mapped(uri, f"locate the files of {name!r} v{version}"):
        source = client.get_model_version_download_uri(name, version)
    return version, dict(found.tags), _download(uri, str(source), directory)


def _download(tracking_uri: str, artifact_uri: str, directory: Path) -> Path:
    import mlflow.artifacts

    with _mapped(tracking_uri, f"download {artifact_uri}"):
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=artifact_uri, dst_path=str(directory),
                                                        tracking_uri=tracking_uri))


def onnx_external_data(path: Path) -> set[str]:
    """The external-data locations (relative to the file's folder, as written) that the ONNX file at `path`
    references: what ONNX Runtime also reads when it loads it. The file is parsed, its external data not read."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    return {entry.value for tensor in _get_all_tensors(model) if uses_external_data(tensor)
            for entry in tensor.external_data if entry.key == "location"}


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


def alias_version(tracking: Tracking, name: str, alias: str) -> str | None:
    """The version an alias points at, or None when the model or the alias does not exist."""
    found = _or_none(tracking.uri, f"look up {name}@{alias}",
                     lambda: tracking.client.get_model_version_by_alias(name, alias))
    return None if found is None else str(found.version)


def load_pytorch_model(uri: str) -> Any:
    """Load an MLflow pytorch model (`models:/…`, `runs:/…`). This unpickles code: trusted registries only.
    A URI that names no loadable model is an `InputError`; a server that cannot be reached stays `Unreachable`."""
    import mlflow
    import mlflow.pytorch

    try:
        with _mapped(mlflow.get_tracking_uri(), f"load {uri}"):
            return mlflow.pytorch.load_model(uri)
    except (Rejected, AttributeError) as err:  # unpickling a class that is not importable is an AttributeError
        cause = err.__cause__ or err
        raise InputError(uri, expected="an MLflow pytorch model URI",
                         found=f"{type(cause).__name__}: {cause}") from err


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
    """Download the version `alias` points at and return its ONNX file (found by its evidence digest:
    `conv.find_by_digest`); None when there is no such alias."""
    found = download_alias(tracking.client, tracking.uri, name, alias, directory)
    if found is None:
        return None
    version, tags, local = found
    path, digest = conv.find_by_digest(local, tags, f"models:/{name}/{version}")
    return RegisteredOnnx(name=name, version=version, alias=alias, path=path, sha256=digest, tags=tags)
