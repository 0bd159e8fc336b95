"""KFP component for calibrate-int8: the INT8 model, its verdict, histograms and HTML report."""

from kfp import dsl

from skewgate.common.images import IMAGE


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
    min_top1_agreement: float = 0.99,
    task: str = "auto",
    class_axis: str = "",
    output_tasks: str = "",
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
) -> str:
    """INT8 (QDQ) calibration of the exported model; labels come from a `labels` array in `eval_data`. The
    defaults are `CalibrateOptions`' (KFP needs them spelled out here; a test holds them equal). Returns the
    verdict status.

    Args:
        onnx_model: FP32 ONNX model written by export.
        calibration_data: `.npz` of calibration inputs named as the model's inputs.
        eval_data: `.npz` of evaluation inputs with a `labels` array for the accuracy budget.
        int8_model: The INT8 (QDQ) ONNX model.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict (promote's evidence).
        html_report: The HTML report.
        histograms: Activation histograms of the calibration (PNG).
        method: Calibration method: auto, minmax, percentile, entropy or mse.
        max_accuracy_drop: Largest top-1 accuracy drop of the INT8 model (0.01 = 1 point).
        min_top1_agreement: Smallest share of samples (pixels for segmentation) the INT8 model leaves unharmed,
            as parity judges it.
        task: What the outputs are: auto, classification, segmentation, embedding or regression.
        class_axis: The class axis of a classification or segmentation output (empty: inferred).
        output_tasks: One output's own task where a model has several, as `NAME=TASK[:AXIS]`, comma-separated
            (`logits=classification,boxes=regression`); the others are judged as `task` says.
        tracking_uri: MLflow tracking URI where the step logs its run and verdict (empty: no MLflow).
        experiment: MLflow experiment of the step's run.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
    """
    from typing import cast

    from skewgate.calibrate.int8.ranges import Method
    from skewgate.calibrate.run import CalibrateOptions, run
    from skewgate.common.errors import InputError
    from skewgate.common.kfp_io import finish
    from skewgate.common.output_tasks import Task, parse_class_axis, parse_output_tasks
    from skewgate.common.recording import TrackingOptions, record_refusal

    tracking = TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id)
    outputs = {"verdict_artifact": verdict, "metrics": metrics, "report": report, "attestation": attestation}
    try:
        # A KFP parameter is a plain string: `calibrate()` checks `method` is a `Method` before anything else;
        # the class axis and the output tasks are parsed here, and one that does not parse is recorded too.
        options = CalibrateOptions(method=cast(Method, method), max_accuracy_drop=max_accuracy_drop,
                                   min_top1_agreement=min_top1_agreement, task=cast(Task, task),
                                   class_axis=parse_class_axis(class_axis),
                                   output_tasks=parse_output_tasks(output_tasks.split(","), field_name="output_tasks"))
    except InputError as err:
        return finish(record_refusal("calibrate", err, tracking,
                                     parameters={"class_axis": class_axis, "output_tasks": output_tasks}), **outputs)
    result = run(onnx=onnx_model.path, calibration=calibration_data.path, eval_data=eval_data.path,
                 out=int8_model.path, plot=histograms.path, html=html_report.path, options=options, tracking=tracking)
    int8_model.metadata["format"] = "onnx-qdq-int8"
    return finish(result, **outputs)
