"""KFP component for triton-probe: probe a Triton URL, or start tritonserver inside the step when none is given."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def triton_probe_op(
    onnx_model: dsl.Input[dsl.Model],
    probe_inputs: dsl.Input[dsl.Dataset],
    model_name: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    triton_url: str = "",
    protocol: str = "http",
    tracking_uri: str = "",
    experiment: str = "",
    pipeline_run_id: str = "",
    stream: bool = False,
    states: str = "",
    initial_state: dsl.Input[dsl.Dataset] = None,  # KFP: an optional input artifact
    max_sequences: int = 4,
    task: str = "auto",
    class_axis: str = "",
    output_tasks: str = "",
) -> str:
    """Probe Triton with the exported model; returns the verdict status.

    Args:
        onnx_model: FP32 ONNX model written by export.
        probe_inputs: `.npz` of inputs named as the model's inputs.
        model_name: Model name on the Triton server (also the MLflow experiment when `experiment` is empty).
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict (promote's evidence).
        triton_url: `host:port` of the Triton to probe; empty: write the model repository and run tritonserver
            in this step (local runs, or a pod whose image carries tritonserver).
        protocol: Triton client protocol, http or grpc.
        tracking_uri: MLflow tracking URI where the step logs its run and verdict (empty: no MLflow).
        experiment: MLflow experiment of the step's run (empty: named as the model).
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        stream: `onnx_model` is a stateful STEP model: probe it under Triton's sequence batcher, each sample of
            `probe_inputs` (batch on axis 0, time on axis 1) one sequence under its own correlation id.
        states: With `stream`, the state pairs `IN=OUT` (STEP input = output of its next value), comma-separated.
        initial_state: With `stream`, `.npz` of one sequence's initial state keyed by state input (absent: zeros).
        max_sequences: With `stream`, how many samples of `probe_inputs` are probed as sequences.
        task: What the outputs are, for their agreement with ONNX Runtime FP32: auto, classification,
            segmentation, embedding or regression.
        class_axis: The class axis of a classification or segmentation output (empty: inferred).
        output_tasks: One output's own task where a model has several, as `NAME=TASK[:AXIS]`, comma-separated.
    """
    from typing import cast

    from skewgate.common.errors import InputError
    from skewgate.common.kfp_io import finish
    from skewgate.common.output_tasks import Task, parse_class_axis, parse_output_tasks
    from skewgate.common.recording import TrackingOptions, record_refusal
    from skewgate.common.states import parse_states
    from skewgate.common.triton.client import Protocol
    from skewgate.probe.run import ProbeOptions, run

    tracking = TrackingOptions(uri=tracking_uri, experiment=experiment or model_name, pipeline_run_id=pipeline_run_id)
    outputs = {"verdict_artifact": verdict, "metrics": metrics, "report": report, "attestation": attestation}
    try:  # a parameter that does not parse is the step's error verdict, recorded as any other
        options = ProbeOptions(protocol=cast(Protocol, protocol), stream=stream, states=parse_states([states]),
                               initial_state=initial_state.path if initial_state is not None else None,
                               max_sequences=max_sequences, task=cast(Task, task),
                               class_axis=parse_class_axis(class_axis),
                               output_tasks=parse_output_tasks(output_tasks.split(","), field_name="output_tasks"))
    except InputError as err:
        return finish(record_refusal("probe", err, tracking, parameters={
            "states": states, "class_axis": class_axis, "output_tasks": output_tasks}), **outputs)
    result = run(url=triton_url, model=model_name, onnx=onnx_model.path, inputs=probe_inputs.path, options=options,
                 tracking=tracking)
    return finish(result, **outputs)
