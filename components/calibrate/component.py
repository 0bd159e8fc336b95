"""KFP component for calibrate-int8: the INT8 model, its verdict, histograms and HTML report."""

from kfp import dsl

from skewgate.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def calibrate_op(
    onnx_model: dsl.Input[dsl.Model],
    calibration_data: dsl.Input[dsl.Dataset],
    eval_data: dsl.Input[dsl.Dataset],
    int8_model: dsl.Output[dsl.Model],
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    html_report: dsl.Output[dsl.HTML],
    histograms: dsl.Output[dsl.Artifact],
    method: str = "auto",
    max_accuracy_drop: float = 0.01,
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
) -> str:
    """INT8 (QDQ) calibration of the exported model; labels come from a `labels` array in `eval_data`. The
    defaults are `CalibrateOptions`' (KFP needs them spelled out here; a test holds them equal)."""
    from skewgate.calibrate.run import CalibrateOptions, run_calibrate
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, evaluate_and_record

    options = CalibrateOptions(method=method, max_accuracy_drop=max_accuracy_drop)
    result = evaluate_and_record(
        "calibrate",
        lambda run: run_calibrate(run, onnx=onnx_model.path, calibration=calibration_data.path,
                                  eval_data=eval_data.path, out=int8_model.path, plot=histograms.path,
                                  html=html_report.path, options=options),
        TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id),
    )
    int8_model.metadata["format"] = "onnx-qdq-int8"
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
