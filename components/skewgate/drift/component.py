"""KFP components for the drift gate (release gate) and the nightly drift check against the champion. Each body
maps artifacts and parameters to paths and options and makes one call to run.py."""

from kfp import dsl

from skewgate.common.images import IMAGE


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
    timestamp: str = "",
    period: str = "none",
) -> str:
    """Drift of `current_data` against `reference_data`; also writes the reference profile for the registry.
    Returns the verdict status.

    Args:
        reference_data: Training features (Parquet, CSV or `.npz`), the drift baseline.
        current_data: Validation or recent serving features with the reference's columns.
        onnx_model: FP32 ONNX model written by export (its integer inputs are treated as ids).
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        html_report: The HTML report.
        attestation: The signed envelope of the verdict (promote's evidence).
        heatmap: Per-feature drift heatmap (PNG).
        profile: The reference profile, stored with the promoted version for the nightly check.
        tracking_uri: MLflow tracking URI where the step logs its run and verdict (empty: no MLflow).
        experiment: MLflow experiment of the step's run.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        seed: Seed for subsampling, feature selection and permutations.
        timestamp: Column of when each row was logged: not a feature (empty: none).
        period: `weekday`: the profile holds one profile per weekday of `timestamp`, and each night is judged
            against its own weekday's (`none`: one profile).
    """
    from typing import cast

    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.drift.run import DriftOptions, run
    from skewgate.drift.stats.periods import Period

    # an unknown period is the run's InputError (an `error` verdict), as a bad column is
    options = DriftOptions(seed=seed, timestamp=timestamp, period=cast(Period, period))
    result = run(reference=reference_data.path, current=current_data.path, model=onnx_model.path,
                 heatmap=heatmap.path, html=html_report.path, profile_out=profile.path, options=options,
                 tracking=TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id))
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
    the figures to `pushgateway_url` when set. Returns the verdict status.

    Args:
        serving_snapshot: Parquet/CSV/`.npz` snapshot of serving inputs with the training features' columns.
        model_name: MLflow registered model whose `alias` version is checked (also the experiment).
        tracking_uri: MLflow tracking URI of the registry and the step's run.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        html_report: The HTML report.
        heatmap: Per-feature drift heatmap (PNG).
        series_state: The anytime-valid series' state after tonight (JSON).
        alias: Registry alias of the version whose profile is the reference.
        run_date: Date of the night checked, keying the run (empty: now).
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        pushgateway_url: Prometheus Pushgateway to push the night's drift figures to (empty: no push).
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.drift.run import NightlyOptions, run_nightly

    result = run_nightly(model_name=model_name, current=serving_snapshot.path, run_date=run_date,
                         heatmap=heatmap.path, html=html_report.path, series_out=series_state.path,
                         options=NightlyOptions(alias=alias, pushgateway_url=pushgateway_url),
                         tracking=TrackingOptions(uri=tracking_uri, experiment=model_name,
                                                  pipeline_run_id=pipeline_run_id))
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
    Parquet footers), which set the share of rows MMD uses as one pass would.

    Args:
        serving_snapshot: Directory (Hive-partitioned or not) or glob of Parquet/CSV files.
        model_name: MLflow registered model whose `alias` version holds the profile.
        tracking_uri: MLflow tracking URI of the registry.
        profile: The `alias` version's drift profile, for the shards and the merge.
        alias: Registry alias of the version whose profile is the reference.
    """
    from skewgate.common.recording import TrackingOptions
    from skewgate.drift.run import NightlyOptions, plan_nightly

    # a read: no step run is created for it
    return plan_nightly(model_name=model_name, snapshot=serving_snapshot.path, profile_out=profile.path,
                        options=NightlyOptions(alias=alias),
                        tracking=TrackingOptions(uri=tracking_uri, experiment=model_name))


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def drift_partial_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    profile: dsl.Input[dsl.Artifact],
    shard: int,
    shards: int,
    rows: int,
    partial: dsl.Output[dsl.Artifact],
) -> None:
    """Mergeable drift statistics of one shard of the snapshot's files against the profile.

    Args:
        serving_snapshot: Directory (Hive-partitioned or not) or glob of Parquet/CSV files.
        profile: The reference profile fetched by the plan task.
        shard: Index of this shard; files are dealt to shards round-robin.
        shards: Number of shards.
        rows: Rows of the whole snapshot (sets the share of rows MMD uses).
        partial: This shard's mergeable statistics.
    """
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
    """The nightly verdict from the shards' statistics; tags the `alias` version and pushes, as the single task.
    Returns the verdict status.

    Args:
        serving_snapshot: Directory (Hive-partitioned or not) or glob of Parquet/CSV files.
        profile: The reference profile fetched by the plan task.
        partials: The shards' mergeable statistics.
        model_name: MLflow registered model whose `alias` version is checked (also the experiment).
        tracking_uri: MLflow tracking URI of the registry and the step's run.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        html_report: The HTML report.
        heatmap: Per-feature drift heatmap (PNG).
        series_state: The anytime-valid series' state after tonight (JSON).
        alias: Registry alias of the version whose profile is the reference.
        run_date: Date of the night checked, keying the run (empty: now).
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        pushgateway_url: Prometheus Pushgateway to push the night's drift figures to (empty: no push).
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.drift.run import NightlyOptions, run_nightly

    result = run_nightly(model_name=model_name, current=serving_snapshot.path, run_date=run_date,
                         partials=[p.path for p in partials], profile=profile.path, heatmap=heatmap.path,
                         html=html_report.path, series_out=series_state.path,
                         options=NightlyOptions(alias=alias, pushgateway_url=pushgateway_url),
                         tracking=TrackingOptions(uri=tracking_uri, experiment=model_name,
                                                  pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)
