"""KFP component for estimate: the model, labelled reference and unlabelled current data in; verdict and the
reliability plot out."""

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
    from skewgate.estimate.core import EstimateOptions
    from skewgate.estimate.method.confusion import Metric
    from skewgate.estimate.run import run

    options = EstimateOptions(metric=cast(Metric, metric), max_drop=max_drop, confidence=confidence,
                              resamples=resamples, labels_key=labels_key,
                              features=tuple(f.strip() for f in features.split(",") if f.strip()))
    result = run(onnx=onnx_model.path, reference=reference_data.path, current=current_data.path, options=options,
                 plot=reliability_plot.path,
                 tracking=TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
