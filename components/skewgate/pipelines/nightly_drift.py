"""The nightly drift pipeline: a serving-log snapshot against the champion's reference profile.

Schedule it with a cron (`skewgate pipeline submit` + a recurring run, or the Helm chart). Each run is keyed by
its schedule time (KFP's schedule-time placeholder) and never cached; a drift `fail` fails the run so alerting
sees it. kfp.local cannot resolve that placeholder, so local runs use `nightly_drift_local`, which dates
itself with the current time. `nightly_drift_fanout` is the same check for a snapshot too big for one pod
(`skewgate pipeline compile|schedule --pipeline nightly-drift-fanout`).
"""

from pathlib import Path
from typing import Any

from kfp import dsl

from skewgate.drift.component import (
    drift_partial_op,
    nightly_drift_merge_op,
    nightly_drift_op,
    nightly_drift_plan_op,
)
from skewgate.estimate.component import (
    estimate_partial_op,
    nightly_estimate_merge_op,
    nightly_estimate_op,
    nightly_estimate_plan_op,
)
from skewgate.pipelines.credentials import mlflow_secret, mount_mlflow_credentials
from skewgate.pipelines.finalize import add_finisher
from skewgate.pipelines.plumbing import blocked as blocked_op
from skewgate.pipelines.resources import StepResources, apply, load_resources, one_line_descriptions


def _fail_run_on(task: Any, *, condition: str, display_name: str, resources: dict[str, StepResources]) -> None:
    """A `fail` verdict of `task` fails the run: a `blocked` task under the condition `condition` raises with it."""
    with dsl.If(task.outputs["Output"] == "fail", name=condition):
        blocked = blocked_op(verdict=task.outputs["verdict"])
        apply(blocked, "blocked", resources).set_display_name(display_name)
        blocked.set_caching_options(False)


def build_nightly_drift(*, run_date: str, resources_file: Path | None = None,
                        mlflow_secret_name: str | None = None) -> Any:
    """The pipeline dated by `run_date`, with the resources of `resources_file` (else `$SKEWGATE_RESOURCES`, else
    the defaults) and the MLflow credentials of the Secret `mlflow_secret_name` (else `$SKEWGATE_MLFLOW_SECRET`;
    empty: none) in the steps that talk to MLflow."""
    resources = load_resources(resources_file)
    credentials = mlflow_secret(mlflow_secret_name)

    @dsl.pipeline(
        name="skewgate-nightly-drift",
        display_name="skewgate nightly drift",
        description="Drift of the latest serving-log snapshot against the champion model's reference profile.",
    )
    def nightly_drift(serving_snapshot: str, model_name: str, mlflow_tracking_uri: str,
                      alias: str = "champion", pushgateway_url: str = "", estimate_accuracy: bool = False,
                      estimate_features: str = "") -> str:
        """One night's drift check, and with `estimate_accuracy` the champion's accuracy estimated without labels;
        returns the outcome (`pass`, or the run fails with `drift` or `degraded`), which the exit handler
        `finish-mlflow-run` also writes to the MLflow parent run.

        Args:
            serving_snapshot: Serving snapshot — URI of a Parquet/CSV/`.npz` snapshot of serving inputs with the
                training features' columns.
            model_name: Registered model — the MLflow registered model whose `alias` version is checked.
            mlflow_tracking_uri: MLflow tracking URI — where the champion's reference profile lives.
            alias: Registry alias — the version to check against (default `champion`).
            pushgateway_url: Pushgateway URL — push the night's drift figures there for Prometheus (empty: no push).
            estimate_accuracy: Estimate accuracy — also estimate the champion's accuracy on the snapshot from the
                estimate profile promoted with it (CBPE, no labels); a champion without one is an error.
            estimate_features: Estimate's model input columns — comma-separated snapshot columns that are the
                model's input, in order (Parquet/CSV snapshots; an `.npz` names its arrays).
        """
        finisher = add_finisher(pipeline="nightly-drift", tracking_uri=mlflow_tracking_uri, experiment=model_name,
                                resources=resources, mlflow_secret=credentials)
        with dsl.ExitHandler(finisher, name="nightly-drift"):
            snapshot = dsl.importer(artifact_uri=serving_snapshot, artifact_class=dsl.Dataset, reimport=True)
            snapshot.set_display_name("serving-snapshot")
            with dsl.If(estimate_accuracy == True, name="estimate-accuracy"):  # noqa: E712 (a KFP condition)
                estimate = nightly_estimate_op(
                    serving_snapshot=snapshot.output, model_name=model_name, tracking_uri=mlflow_tracking_uri,
                    alias=alias, features=estimate_features, run_date=run_date,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, pushgateway_url=pushgateway_url)
                apply(estimate, "nightly-drift", resources).set_display_name("nightly-estimate")
                mount_mlflow_credentials(estimate, "nightly-drift", credentials)
                estimate.set_caching_options(False)
                _fail_run_on(estimate, condition="accuracy-dropped", display_name="estimate-blocked",
                             resources=resources)
            check = nightly_drift_op(
                serving_snapshot=snapshot.output,
                model_name=model_name,
                tracking_uri=mlflow_tracking_uri,
                alias=alias,
                run_date=run_date,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                pushgateway_url=pushgateway_url,
            )
            apply(check, "nightly-drift", resources).set_display_name("nightly-drift")
            mount_mlflow_credentials(check, "nightly-drift", credentials)
            check.set_caching_options(False)
            _fail_run_on(check, condition="drift-detected", display_name="drift-blocked", resources=resources)
        return finisher.output

    return one_line_descriptions(nightly_drift)


def build_nightly_drift_fanout(*, run_date: str, shards: int = 4, resources_file: Path | None = None,
                               mlflow_secret_name: str | None = None) -> Any:
    """`shards`: partial-statistics tasks (a compile-time constant: the loop's items are fixed, which every
    runner supports); files are dealt to them round-robin, a shard without files contributes nothing. Every
    task has the `nightly-drift` resources (`resources_file`, else `$SKEWGATE_RESOURCES`, else the defaults);
    the tasks that talk to MLflow get the credentials of the Secret `mlflow_secret_name` (else
    `$SKEWGATE_MLFLOW_SECRET`; empty: none)."""
    resources = load_resources(resources_file)
    credentials = mlflow_secret(mlflow_secret_name)

    @dsl.pipeline(
        name="skewgate-nightly-drift-fanout",
        display_name="skewgate nightly drift (fan-out)",
        description="Nightly drift of a snapshot too big for one pod: its files split over a ParallelFor of "
                    "partial-statistics tasks, one merge task decides (the single task's verdict).",
    )
    def nightly_drift_fanout(serving_snapshot: str, model_name: str, mlflow_tracking_uri: str,
                             alias: str = "champion", pushgateway_url: str = "", estimate_accuracy: bool = False,
                             estimate_features: str = "") -> str:
        """One night's drift check, and with `estimate_accuracy` the champion's accuracy estimated without labels,
        both fanned out over the same shards; returns the outcome (`pass`, or the run fails with `drift` or
        `degraded`), which the exit handler `finish-mlflow-run` also writes to the MLflow parent run.

        Args:
            serving_snapshot: Serving snapshot — URI of a directory (Hive-partitioned or not) or glob of
                Parquet/CSV files of serving inputs with the training features' columns.
            model_name: Registered model — the MLflow registered model whose `alias` version is checked.
            mlflow_tracking_uri: MLflow tracking URI — where the champion's reference profile lives.
            alias: Registry alias — the version to check against (default `champion`).
            pushgateway_url: Pushgateway URL — push the night's drift figures there for Prometheus (empty: no push).
            estimate_accuracy: Estimate accuracy — also estimate the champion's accuracy on the snapshot from the
                estimate profile promoted with it (CBPE, no labels); a champion without one is an error.
            estimate_features: Estimate's model input columns — comma-separated snapshot columns that are the
                model's input, in order (Parquet/CSV snapshots; an `.npz` names its arrays).
        """
        finisher = add_finisher(pipeline="nightly-drift", tracking_uri=mlflow_tracking_uri, experiment=model_name,
                                resources=resources, mlflow_secret=credentials)
        with dsl.ExitHandler(finisher, name="nightly-drift"):
            snapshot = dsl.importer(artifact_uri=serving_snapshot, artifact_class=dsl.Dataset, reimport=True)
            snapshot.set_display_name("serving-snapshot")
            with dsl.If(estimate_accuracy == True, name="estimate-accuracy"):  # noqa: E712 (a KFP condition)
                fetch = nightly_estimate_plan_op(model_name=model_name, tracking_uri=mlflow_tracking_uri,
                                                 alias=alias)
                apply(fetch, "nightly-drift", resources).set_display_name("fetch-estimate-profile")
                mount_mlflow_credentials(fetch, "nightly-drift-plan", credentials)
                fetch.set_caching_options(False)
                with dsl.ParallelFor(list(range(shards)), name="estimate-shards") as estimate_shard:
                    tally = estimate_partial_op(
                        serving_snapshot=snapshot.output, onnx_model=fetch.outputs["onnx_model"],
                        profile=fetch.outputs["profile"], shard=estimate_shard, shards=shards,
                        features=estimate_features)
                    apply(tally, "nightly-drift", resources).set_display_name("estimate-shard")
                    tally.set_caching_options(False)
                estimate = nightly_estimate_merge_op(
                    serving_snapshot=snapshot.output, partials=dsl.Collected(tally.outputs["partial"]),
                    model_name=model_name, tracking_uri=mlflow_tracking_uri, alias=alias, features=estimate_features,
                    run_date=run_date, pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    pushgateway_url=pushgateway_url)
                apply(estimate, "nightly-drift", resources).set_display_name("nightly-estimate")
                mount_mlflow_credentials(estimate, "nightly-drift", credentials)
                estimate.set_caching_options(False)
                _fail_run_on(estimate, condition="accuracy-dropped", display_name="estimate-blocked",
                             resources=resources)
            plan = nightly_drift_plan_op(serving_snapshot=snapshot.output, model_name=model_name,
                                         tracking_uri=mlflow_tracking_uri, alias=alias)
            apply(plan, "nightly-drift", resources).set_display_name("fetch-profile").set_caching_options(False)
            mount_mlflow_credentials(plan, "nightly-drift-plan", credentials)
            with dsl.ParallelFor(list(range(shards)), name="shards") as shard:
                part = drift_partial_op(serving_snapshot=snapshot.output, profile=plan.outputs["profile"],
                                        shard=shard, shards=shards, rows=plan.outputs["Output"])
                apply(part, "nightly-drift", resources).set_display_name("partial-statistics")
                part.set_caching_options(False)
            check = nightly_drift_merge_op(
                serving_snapshot=snapshot.output, profile=plan.outputs["profile"],
                partials=dsl.Collected(part.outputs["partial"]), model_name=model_name,
                tracking_uri=mlflow_tracking_uri, alias=alias, run_date=run_date,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, pushgateway_url=pushgateway_url)
            apply(check, "nightly-drift", resources).set_display_name("nightly-drift").set_caching_options(False)
            mount_mlflow_credentials(check, "nightly-drift", credentials)
            _fail_run_on(check, condition="drift-detected", display_name="drift-blocked", resources=resources)
        return finisher.output

    return one_line_descriptions(nightly_drift_fanout)


nightly_drift = build_nightly_drift(run_date=dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER)
nightly_drift_fanout = build_nightly_drift_fanout(run_date=dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER)
nightly_drift_fanout_local = build_nightly_drift_fanout(run_date="", shards=2, mlflow_secret_name="")
nightly_drift_local = build_nightly_drift(run_date="", mlflow_secret_name="")
