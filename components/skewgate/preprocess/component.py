"""KFP component for preprocess: the training and the serving preprocessing on the same raw samples."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def preprocess_op(
    raw_data: dsl.Input[dsl.Dataset],
    train_fn: str,
    serve_fn: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    array: str = "",
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
) -> str:
    """The training and the serving preprocessing on the same raw samples. Returns the verdict status.

    Args:
        raw_data: `.npz` of raw samples.
        train_fn: Training preprocessing as `module:function`, importable in the component image.
        serve_fn: Serving preprocessing as `module:function`, importable in the component image.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict.
        array: Which array of the raw `.npz` (empty: the first).
        tracking_uri: MLflow tracking URI where the step logs its run and verdict (empty: no MLflow).
        experiment: MLflow experiment of the step's run.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.preprocess.run import PreprocessOptions, run

    result = run(train=train_fn, serve=serve_fn, raw=raw_data.path, options=PreprocessOptions(array=array or None),
                 tracking=TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
