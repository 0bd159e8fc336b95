"""KFP components for estimate: the gate (the model, labelled reference and unlabelled current data in; verdict,
the reliability plot and the estimate profile promote records with the version out), the night (a serving
snapshot against the champion's own profile) and the night fanned out (plan, a task per shard, merge)."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def estimate_op(
    onnx_model: dsl.Input[dsl.Model],
    reference_data: dsl.Input[dsl.Dataset],
    current_data: dsl.Input[dsl.Dataset],
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    reliability_plot: dsl.Output[dsl.Artifact],
    profile: dsl.Output[dsl.Artifact],
    metric: str = "accuracy",
    max_drop: float = 0.02,
    confidence: float = 0.95,
    resamples: int = 200,
    labels_key: str = "labels",
    features: str = "",
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
) -> str:
    """Estimate the model's `metric` on `current_data` without labels, from its scores calibrated on
    `reference_data` (CBPE), and fail when the whole interval lies more than `max_drop` below the reference.
    Returns the verdict status. Defaults equal `EstimateOptions` (KFP needs them spelled out; a test holds them
    equal).

    Args:
        onnx_model: The classifier as ONNX.
        reference_data: Labelled reference inputs (`.npz` with a `labels_key` array, or Parquet/CSV with `features`
            and a `labels_key` column).
        current_data: Unlabelled current inputs, in the reference's form.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict.
        reliability_plot: The calibration on the reference, out of fold (PNG).
        profile: The estimate profile (the calibration and the reference's figures), stored with the promoted
            version for the nightly estimate.
        metric: accuracy or macro_f1 (the one judged; both are reported).
        max_drop: Largest drop below the reference's metric the interval may show.
        confidence: Level of the interval.
        resamples: Bootstrap calibrations behind the interval.
        labels_key: The reference's array or column of labels.
        features: Comma-separated table columns that are the model's input (Parquet/CSV data).
        tracking_uri: MLflow tracking URI (empty: not recorded).
        experiment: MLflow experiment.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
    """
    from typing import cast

    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.estimate.core import EstimateOptions, feature_columns
    from skewgate.estimate.method.confusion import Metric
    from skewgate.estimate.run import run

    options = EstimateOptions(metric=cast(Metric, metric), max_drop=max_drop, confidence=confidence,
                              resamples=resamples, labels_key=labels_key,
                              features=feature_columns(features))
    result = run(onnx=onnx_model.path, reference=reference_data.path, current=current_data.path, options=options,
                 plot=reliability_plot.path, profile_out=profile.path,
                 tracking=TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_estimate_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    reliability_plot: dsl.Output[dsl.Artifact],
    nights_plot: dsl.Output[dsl.Artifact],
    alias: str = "champion",
    features: str = "",
    run_date: str = "",
    pipeline_run_id: str = "",
    pushgateway_url: str = "",
    snapshot_labels: dsl.Input[dsl.Dataset] = None,  # KFP: an optional input artifact
) -> str:
    """Estimate the `alias` version's accuracy on a serving snapshot from the estimate profile stored with it (no
    labels); tags that version with the night and the last nights; pushes the figures to `pushgateway_url` when
    set. Returns the verdict status.

    Args:
        serving_snapshot: Snapshot of serving inputs (`.npz` arrays named like the model's inputs, or Parquet/CSV
            with `features`).
        model_name: MLflow registered model whose `alias` version is estimated (also the experiment).
        tracking_uri: MLflow tracking URI of the registry and the step's run.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        reliability_plot: The champion's calibration and where tonight's samples fall (PNG).
        nights_plot: The estimate over the last nights, with the realised accuracy where labels arrived (PNG).
        alias: Registry alias of the version whose profile calibrates tonight.
        features: Comma-separated table columns that are the model's input (Parquet/CSV snapshots).
        run_date: Date of the night, keying its history entry (empty: now).
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        pushgateway_url: Prometheus Pushgateway to push the night's estimate to (empty: no push).
        snapshot_labels: The snapshot's labels (`.npy`), when they arrived after its night: the realised accuracy
            joins that night's history entry and series, beside its estimate.
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.estimate.core import EstimateOptions, feature_columns
    from skewgate.estimate.nightly.night import NightlyEstimateOptions, run_nightly

    estimate = EstimateOptions(features=feature_columns(features))
    result = run_nightly(model_name=model_name, current=serving_snapshot.path, run_date=run_date,
                         plot=reliability_plot.path, history_plot=nights_plot.path,
                         labels=snapshot_labels.path if snapshot_labels else None,
                         options=NightlyEstimateOptions(alias=alias, estimate=estimate,
                                                        pushgateway_url=pushgateway_url),
                         tracking=TrackingOptions(uri=tracking_uri, experiment=model_name,
                                                  pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_estimate_plan_op(
    model_name: str,
    tracking_uri: str,
    onnx_model: dsl.Output[dsl.Model],
    profile: dsl.Output[dsl.Artifact],
    alias: str = "champion",
) -> None:
    """Fetch the `alias` version's ONNX file and estimate profile once for every shard (each checked against the
    digest it was promoted with).

    Args:
        model_name: MLflow registered model whose `alias` version is estimated.
        tracking_uri: MLflow tracking URI of the registry.
        onnx_model: The version's ONNX file, for the shards.
        profile: The version's estimate profile, for the shards.
        alias: Registry alias of the version whose profile calibrates tonight.
    """
    from skewgate.common.recording import TrackingOptions
    from skewgate.estimate.nightly.night import NightlyEstimateOptions, plan_nightly

    # a read: no step run is created for it
    plan_nightly(model_name=model_name, options=NightlyEstimateOptions(alias=alias), model_out=onnx_model.path,
                 profile_out=profile.path, tracking=TrackingOptions(uri=tracking_uri, experiment=model_name))


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def estimate_partial_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    onnx_model: dsl.Input[dsl.Model],
    profile: dsl.Input[dsl.Artifact],
    shard: int,
    shards: int,
    partial: dsl.Output[dsl.Artifact],
    features: str = "",
) -> None:
    """The model run on one shard of the snapshot's files, its scores tallied under the profile (mergeable).

    Args:
        serving_snapshot: Directory (Hive-partitioned or not) or glob of Parquet/CSV files.
        onnx_model: The champion's ONNX file fetched by the plan task.
        profile: The champion's estimate profile fetched by the plan task.
        shard: Index of this shard; files are dealt to shards round-robin, as drift's are.
        shards: Number of shards.
        partial: This shard's counts, for the merge.
        features: Comma-separated table columns that are the model's input, in order.
    """
    from skewgate.estimate.core import EstimateOptions, feature_columns, tally_shard

    options = EstimateOptions(features=feature_columns(features))
    tally_shard(onnx=onnx_model.path, profile=profile.path, current=serving_snapshot.path, shard=shard,
                shards=shards, options=options, out=partial.path)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_estimate_merge_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    partials: dsl.Input[list[dsl.Artifact]],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    reliability_plot: dsl.Output[dsl.Artifact],
    nights_plot: dsl.Output[dsl.Artifact],
    alias: str = "champion",
    features: str = "",
    run_date: str = "",
    pipeline_run_id: str = "",
    pushgateway_url: str = "",
) -> str:
    """The night's estimate from the shards' counts; tags the `alias` version and pushes, as the single task
    does (shards tallied under another model or profile than the version's now are refused). Returns the
    verdict status.

    Args:
        serving_snapshot: Directory (Hive-partitioned or not) or glob of Parquet/CSV files.
        partials: The shards' counts.
        model_name: MLflow registered model whose `alias` version is estimated (also the experiment).
        tracking_uri: MLflow tracking URI of the registry and the step's run.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        reliability_plot: The champion's calibration and where tonight's samples fall (PNG).
        nights_plot: The estimate over the last nights (PNG).
        alias: Registry alias of the version whose profile calibrates tonight.
        features: Comma-separated table columns that are the model's input, in order.
        run_date: Date of the night, keying its history entry (empty: now).
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        pushgateway_url: Prometheus Pushgateway to push the night's estimate to (empty: no push).
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.estimate.core import EstimateOptions, feature_columns
    from skewgate.estimate.nightly.night import NightlyEstimateOptions, run_nightly

    estimate = EstimateOptions(features=feature_columns(features))
    result = run_nightly(model_name=model_name, current=serving_snapshot.path, run_date=run_date,
                         plot=reliability_plot.path, history_plot=nights_plot.path,
                         partials=[p.path for p in partials],
                         options=NightlyEstimateOptions(alias=alias, estimate=estimate,
                                                        pushgateway_url=pushgateway_url),
                         tracking=TrackingOptions(uri=tracking_uri, experiment=model_name,
                                                  pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)
