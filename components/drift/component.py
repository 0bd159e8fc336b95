"""KFP components for the drift gate (release gate) and the nightly drift check against the champion. Each body
maps artifacts to paths and calls run.py; the MLflow registry is built here, at the edge (`MlflowRegistry`)."""

from kfp import dsl

from skewgate.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def drift_op(
    reference_data: dsl.Input[dsl.Dataset],
    current_data: dsl.Input[dsl.Dataset],
    onnx_model: dsl.Input[dsl.Model],
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    html_report: dsl.Output[dsl.HTML],
    heatmap: dsl.Output[dsl.Artifact],
    profile: dsl.Output[dsl.Artifact],
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
    seed: int = 0,
) -> str:
    """Drift of `current_data` against `reference_data`; also writes the reference profile for the registry."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.drift.run import DriftOptions, Pictures, run_drift

    result = evaluate_and_record(
        "drift",
        lambda run: run_drift(run, reference=reference_data.path, current=current_data.path, model=onnx_model.path,
                              options=DriftOptions(seed=seed), pictures=Pictures(heatmap=heatmap.path,
                                                                                 html=html_report.path),
                              profile_out=profile.path),
        TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_drift_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    html_report: dsl.Output[dsl.HTML],
    heatmap: dsl.Output[dsl.Artifact],
    series_state: dsl.Output[dsl.Artifact],
    alias: str = "champion",
    run_date: str = "",
    pipeline_run_id: str = "",
    pushgateway_url: str = "",
) -> str:
    """Drift of a serving-log snapshot against the profile stored with the `alias` version; tags that version
    (with the anytime-valid series' state, read back the next night; also written to `series_state`); pushes
    the figures to `pushgateway_url` when set."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.mlflow_log import MlflowRegistry
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.drift.run import Pictures, require_tracking, run_nightly

    result = evaluate_and_record(
        "nightly-drift",
        lambda run: run_nightly(run, MlflowRegistry(require_tracking(run)), model_name=model_name, alias=alias,
                                current=serving_snapshot.path, run_date=run_date,
                                pictures=Pictures(heatmap=heatmap.path, html=html_report.path),
                                pushgateway=pushgateway_url, series_out=series_state.path),
        TrackingOptions(uri=tracking_uri, experiment=model_name, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_drift_plan_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    model_name: str,
    tracking_uri: str,
    profile: dsl.Output[dsl.Artifact],
    alias: str = "champion",
) -> int:
    """Fetch the `alias` version's drift profile once for every shard; return the snapshot's rows (from the
    Parquet footers), which set the share of rows MMD uses as one pass would."""
    from skewgate.common.mlflow_log import MlflowRegistry, StepRun, connect
    from skewgate.drift.run import plan_nightly

    # a read: no step run is created for it
    registry = MlflowRegistry(StepRun(connect(tracking_uri, experiment=model_name), "", "nightly-drift-plan"))
    return plan_nightly(registry, model_name=model_name, alias=alias, snapshot=serving_snapshot.path,
                        profile_out=profile.path)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def drift_partial_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    profile: dsl.Input[dsl.Artifact],
    shard: int,
    shards: int,
    rows: int,
    partial: dsl.Output[dsl.Artifact],
) -> None:
    """Mergeable drift statistics of one shard of the snapshot's files against the profile."""
    from skewgate.drift.run import partial_statistics

    partial_statistics(profile.path, serving_snapshot.path, shard=shard, shards=shards, rows=rows, out=partial.path)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_drift_merge_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    profile: dsl.Input[dsl.Artifact],
    partials: dsl.Input[list[dsl.Artifact]],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    html_report: dsl.Output[dsl.HTML],
    heatmap: dsl.Output[dsl.Artifact],
    series_state: dsl.Output[dsl.Artifact],
    alias: str = "champion",
    run_date: str = "",
    pipeline_run_id: str = "",
    pushgateway_url: str = "",
) -> str:
    """The nightly verdict from the shards' statistics; tags the `alias` version and pushes, as the single task."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.mlflow_log import MlflowRegistry
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.drift.run import Pictures, require_tracking, run_nightly

    result = evaluate_and_record(
        "nightly-drift",
        lambda run: run_nightly(run, MlflowRegistry(require_tracking(run)), model_name=model_name, alias=alias,
                                current=serving_snapshot.path, run_date=run_date,
                                pictures=Pictures(heatmap=heatmap.path, html=html_report.path),
                                pushgateway=pushgateway_url, partials=[p.path for p in partials],
                                profile=profile.path, series_out=series_state.path),
        TrackingOptions(uri=tracking_uri, experiment=model_name, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def drift_blocked(verdict: dsl.Input[dsl.Artifact]) -> None:
    """Fails the nightly run on a drift `fail`, so that alerting sees it."""
    from skewgate.common.verdict import Verdict

    raise RuntimeError(f"drift detected: {Verdict.read(verdict.path).message}")
