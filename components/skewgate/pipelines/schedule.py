"""Upload the compiled pipelines to a KFP API server and create the nightly drift recurring run (of the single-task
nightly drift, or of its fan-out: `Schedule.nightly`).

What the chart's upload Job runs, and `skewgate pipeline schedule` from a laptop. Idempotent, so a `helm upgrade`
can run it again: a pipeline that exists gets a new version, and a recurring run of the same name is replaced.
The KFP client is a seam (`KfpApi`): no cluster is reachable from CI, so the tests hand in a fake that records
the calls (README: cluster section). Every call runs inside `map_errors("KFP API", …)`: a server that cannot be
reached is `Unreachable`, a refusal (kfp_server_api's ApiException) `Rejected` with its HTTP status.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skewgate import __version__
from skewgate.common.errors import InputError, map_errors

log = logging.getLogger(__name__)
NIGHTLY = "nightly-drift"


class KfpApi(Protocol):
    """The part of `kfp.Client` this module uses."""

    def get_pipeline_id(self, name: str) -> str | None: ...
    def upload_pipeline(self, pipeline_package_path: str, pipeline_name: str, description: str) -> Any: ...
    def upload_pipeline_version(self, pipeline_package_path: str, pipeline_version_name: str,
                                pipeline_id: str) -> Any: ...
    def create_experiment(self, name: str, namespace: str | None = None) -> Any: ...
    def list_recurring_runs(self, experiment_id: str, page_size: int) -> Any: ...
    def delete_recurring_run(self, recurring_run_id: str) -> Any: ...
    def create_recurring_run(self, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class Schedule:
    cron: str  # six fields, seconds first (KFP's cron format)
    params: Mapping[str, str]  # the nightly pipeline's arguments
    experiment: str = "skewgate"
    namespace: str | None = None
    version: str = __version__  # pipeline version name prefix (the chart passes its appVersion)
    recurring: bool = True  # False: upload the pipelines only
    nightly: str = NIGHTLY  # the pipeline the recurring run runs: nightly-drift or nightly-drift-fanout


def check_cron(cron: str) -> str:
    fields = cron.split()
    if len(fields) != 6:
        raise InputError("--cron", expected="6 fields, seconds first (e.g. '0 0 2 * * *' for 02:00 daily)",
                         found=f"{len(fields)} fields in {cron!r}")
    return cron


def schedule(client: KfpApi, plan: Schedule, *, pipelines: Mapping[str, Any]) -> str | None:
    """Upload every pipeline in `pipelines` (name → pipeline function), then (re)create the nightly recurring
    run of `plan.nightly`: max concurrency 1 (two nightly checks never overlap) and no catch-up (a paused
    schedule does not replay every missed night). The recurring run keeps one name whichever nightly pipeline
    it runs, so switching to the fan-out replaces the single-task run instead of adding a second. Returns the
    recurring run's id (None with `recurring=False`)."""
    from kfp import compiler

    check_cron(plan.cron)
    ids: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="skewgate-pipelines-") as tmp:
        for name, pipeline in pipelines.items():
            package = Path(tmp) / f"{name}.yaml"
            compiler.Compiler().compile(pipeline, str(package))
            ids[name] = _upload(client, name, package, plan.version)
    if not plan.recurring:
        return None
    if plan.nightly not in ids:
        raise InputError("pipelines", expected=f"the {plan.nightly!r} pipeline", found=f"{sorted(ids)}")
    with _mapped(f"create experiment {plan.experiment!r}"):
        experiment_id = client.create_experiment(plan.experiment, namespace=plan.namespace).experiment_id
    job_name = f"skewgate-{NIGHTLY}"
    with _mapped("list recurring runs"):
        listing = client.list_recurring_runs(experiment_id=experiment_id, page_size=100)
    for existing in getattr(listing, "recurring_runs", None) or []:
        if existing.display_name == job_name:
            log.info("replacing recurring run %s (%s)", job_name, existing.recurring_run_id)
            with _mapped("delete recurring run"):
                client.delete_recurring_run(existing.recurring_run_id)
    pipeline_id, version_id = ids[plan.nightly]
    with _mapped("create recurring run"):
        created = client.create_recurring_run(
            experiment_id=experiment_id, job_name=job_name, cron_expression=plan.cron, max_concurrency=1,
            no_catchup=True, params=dict(plan.params), pipeline_id=pipeline_id, version_id=version_id, enabled=True)
    log.info("recurring run %s: %s, max concurrency 1, no catch-up", job_name, plan.cron)
    return str(created.recurring_run_id)


def _upload(client: KfpApi, name: str, package: Path, version: str) -> tuple[str, str]:
    """(pipeline id, version id): a new pipeline, or a new version of the one that has this name."""
    display = f"skewgate-{name}"
    with _mapped(f"look up pipeline {display!r}"):
        existing = client.get_pipeline_id(display)
    if existing is None:
        with _mapped(f"upload pipeline {display!r}"):
            pipeline_id = client.upload_pipeline(str(package), pipeline_name=display,
                                                 description=f"skewgate {name} (uploaded by skewgate)").pipeline_id
    else:
        pipeline_id = existing
    stamp = uuid.uuid4().hex[:8]  # unique per upload: KFP refuses a version name twice
    with _mapped(f"upload a version of {display!r}"):
        created = client.upload_pipeline_version(str(package), pipeline_version_name=f"{version}-{stamp}",
                                                 pipeline_id=pipeline_id)
    log.info("uploaded %s as pipeline %s, version %s", display, pipeline_id, created.pipeline_version_id)
    return pipeline_id, created.pipeline_version_id


def _mapped(what: str) -> contextlib.AbstractContextManager[None]:
    return map_errors("KFP API", what)
