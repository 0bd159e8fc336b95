"""KFP component for parity-diff: layerwise PyTorch vs ONNX Runtime (and Triton when a URL is given)."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def parity_op(
    torch_model: dsl.Input[dsl.Model],
    onnx_model: dsl.Input[dsl.Model],
    int8_model: dsl.Input[dsl.Model],
    eval_data: dsl.Input[dsl.Dataset],
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    html_report: dsl.Output[dsl.HTML],
    layer_plot: dsl.Output[dsl.Artifact],
    stream_onnx: dsl.Input[dsl.Model] = None,
    initial_state: dsl.Input[dsl.Dataset] = None,
    states: str = "",
    triton_url: str = "",
    triton_model: str = "",
    triton_serves: str = "fp32",
    fp16: bool = False,
    layerwise: bool = True,
    task: str = "auto",
    class_axis: str = "",
    output_tasks: str = "",
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
) -> str:
    """Layerwise parity of the exported model and its INT8 version; against Triton too when `triton_url` is set;
    with `fp16`, also its FP16 conversion value by value, with the nodes to keep in FP32 proposed and checked.
    With `stream_onnx` (a sequence model's one-step model as served), also stream mode: STEP driven step by step
    with its `states` fed back against `onnx_model` on whole sequences. Returns the verdict status.

    Args:
        torch_model: Candidate torch.export `.pt2` program (the reference).
        onnx_model: FP32 ONNX model written by export.
        int8_model: INT8 ONNX model written by calibrate.
        eval_data: `.npz` of inputs named as the model's inputs.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict (promote's evidence).
        html_report: The HTML report.
        layer_plot: Per-layer error plot (PNG).
        stream_onnx: Stream mode's STEP ONNX model (`skewgate parity --stream-onnx`); none: no stream mode.
        initial_state: `.npz` keyed by state input name, the state each sequence starts from (none: zeros).
        states: `IN=OUT` state pairs of `stream_onnx` as `skewgate parity --state`, comma-separated.
        triton_url: `host:port` of a live Triton to check as well (empty: none).
        triton_model: Model name on that Triton (required with `triton_url`).
        triton_serves: What that model computes in: fp32 (held to FP32's tolerances and the agreement), or fp16 /
            int8 (the agreement alone; the release policy must allow it).
        fp16: Also judge an FP16 conversion of the model and propose the nodes to keep in FP32.
        layerwise: Compare every intermediate layer, not only the outputs.
        task: What the outputs are, for the INT8 judgement: auto, classification, segmentation, embedding or
            regression.
        class_axis: The class axis of a classification or segmentation output (empty: inferred).
        output_tasks: One output's own task where a model has several, as `NAME=TASK[:AXIS]`, comma-separated
            (`logits=classification,boxes=regression`); the others are judged as `task` says.
        tracking_uri: MLflow tracking URI where the step logs its run and verdict (empty: no MLflow).
        experiment: MLflow experiment of the step's run.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
    """
    from typing import cast

    from skewgate.common.errors import InputError
    from skewgate.common.kfp_io import finish
    from skewgate.common.output_tasks import Task, parse_class_axis, parse_output_tasks
    from skewgate.common.recording import TrackingOptions, record_refusal
    from skewgate.common.states import parse_states
    from skewgate.parity.core import Served
    from skewgate.parity.run import ParityOptions, run

    tracking = TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id)
    outputs = {"verdict_artifact": verdict, "metrics": metrics, "report": report, "attestation": attestation}
    try:  # a parameter that does not parse is the step's error verdict, recorded as any other
        options = ParityOptions(layerwise=layerwise, task=cast(Task, task), class_axis=parse_class_axis(class_axis),
                                output_tasks=parse_output_tasks(output_tasks.split(","), field_name="output_tasks"),
                                stream_onnx=stream_onnx.path if stream_onnx else None, states=parse_states([states]),
                                initial_state=initial_state.path if initial_state else None,
                                triton_serves=cast(Served, triton_serves))
    except InputError as err:
        return finish(record_refusal("parity", err, tracking, parameters={
            "class_axis": class_axis, "output_tasks": output_tasks, "states": states}), **outputs)
    result = run(torch_model=torch_model.path, onnx=onnx_model.path, int8=int8_model.path, inputs=eval_data.path,
                 triton_url=triton_url, triton_model=triton_model, fp16=fp16, plot=layer_plot.path,
                 html=html_report.path, options=options, tracking=tracking)
    return finish(result, **outputs)
