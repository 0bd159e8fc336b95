"""KFP component for preprocess: the training and the serving preprocessing on the same raw samples."""

from kfp import dsl

from skewgate.images import IMAGE


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
    """`train_fn` / `serve_fn` as `module:function`, importable in the component image; `array`: which array of
    the raw .npz ("" for the first). Returns the verdict status."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.preprocess.run import PreprocessOptions, run_preprocess

    result = evaluate_and_record(
        "preprocess",
        lambda _run: run_preprocess(train=train_fn, serve=serve_fn, raw=raw_data.path,
                                    options=PreprocessOptions(array=array or None)),
        TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
