"""The release-gate pipeline: export → calibrate-int8 → (drift ∥ parity-diff ∥ triton-probe) → promote.

Promote runs last, uncached and never retried by KFP (a refusal is an answer, not a transient error); when it
refuses, `gate_blocked` fails the run so the KFP UI and alerting show the block.
"""

from kfp import dsl

from skewgate.calibrate.component import calibrate_op
from skewgate.drift.component import drift_op
from skewgate.export.component import export_op
from skewgate.parity.component import parity_op
from skewgate.probe.component import triton_probe_op
from skewgate.promote.component import gate_blocked, promote_op

REQUIRED_STEPS = "export,calibrate,drift,parity,probe"


@dsl.pipeline(
    name="skewgate-release-gate",
    description="Gate MLflow registry promotion of a PyTorch model on export, INT8 calibration, drift, "
                "layerwise parity and a Triton probe.",
)
def release_gate(
    candidate_model: str,
    eval_data: str,
    reference_data: str,
    current_data: str,
    calibration_data: str,
    model_name: str,
    mlflow_tracking_uri: str,
    alias: str = "champion",
    allow_warn: bool = False,
    max_samples: int = 64,
    triton_url: str = "",
    max_accuracy_drop: float = 0.01,
    fp16_candidate: bool = False,
) -> str:
    """`candidate_model`: URI of the `.pt2`; `eval_data`: URI of the `.npz` of example inputs; `reference_data`
    and `current_data`: URIs of the training and validation/recent serving features (Parquet, CSV or `.npz`);
    `calibration_data`: URI of the `.npz` of INT8 calibration inputs (labels for the budget come from a `labels`
    array in `eval_data`); `max_accuracy_drop`: the INT8 accuracy budget;
    `triton_url`: host:port of the Triton server to probe (empty: the probe step starts its own);
    `fp16_candidate`: parity also judges the model's FP16 conversion, value by value (a failing FP16 blocks).

    Returns promote's status (`pass` = promoted); a refused promotion fails the run in `gate-blocked`.
    """
    model = dsl.importer(artifact_uri=candidate_model, artifact_class=dsl.Model, reimport=True)
    model.set_display_name("candidate-model")
    data = dsl.importer(artifact_uri=eval_data, artifact_class=dsl.Dataset, reimport=True)
    data.set_display_name("eval-data")

    export = export_op(
        model=model.output,
        example_inputs=data.output,
        tracking_uri=mlflow_tracking_uri,
        experiment=model_name,
        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        max_samples=max_samples,
    )
    export.set_display_name("export")

    calibration = dsl.importer(artifact_uri=calibration_data, artifact_class=dsl.Dataset, reimport=True)
    calibration.set_display_name("calibration-data")
    calibrate = calibrate_op(
        onnx_model=export.outputs["onnx_model"],
        calibration_data=calibration.output,
        eval_data=data.output,
        max_accuracy_drop=max_accuracy_drop,
        tracking_uri=mlflow_tracking_uri,
        experiment=model_name,
        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    calibrate.set_display_name("calibrate-int8")

    reference = dsl.importer(artifact_uri=reference_data, artifact_class=dsl.Dataset, reimport=True)
    reference.set_display_name("reference-data")
    current = dsl.importer(artifact_uri=current_data, artifact_class=dsl.Dataset, reimport=True)
    current.set_display_name("current-data")
    drift = drift_op(
        reference_data=reference.output,
        current_data=current.output,
        onnx_model=export.outputs["onnx_model"],
        tracking_uri=mlflow_tracking_uri,
        experiment=model_name,
        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    drift.set_display_name("drift-gate")

    parity = parity_op(
        torch_model=model.output,
        onnx_model=export.outputs["onnx_model"],
        int8_model=calibrate.outputs["int8_model"],
        eval_data=data.output,
        triton_url=triton_url,
        triton_model=model_name,
        fp16=fp16_candidate,
        tracking_uri=mlflow_tracking_uri,
        experiment=model_name,
        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    parity.set_display_name("parity-diff")

    probe = triton_probe_op(
        onnx_model=export.outputs["onnx_model"],
        probe_inputs=data.output,
        model_name=model_name,
        triton_url=triton_url,
        tracking_uri=mlflow_tracking_uri,
        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    probe.set_display_name("triton-probe")

    promote = promote_op(
        onnx_model=export.outputs["onnx_model"],
        export_verdict=export.outputs["verdict"],
        drift_verdict=drift.outputs["verdict"],
        probe_verdict=probe.outputs["verdict"],
        parity_verdict=parity.outputs["verdict"],
        calibrate_verdict=calibrate.outputs["verdict"],
        model_name=model_name,
        tracking_uri=mlflow_tracking_uri,
        alias=alias,
        required_steps=REQUIRED_STEPS,
        allow_warn=allow_warn,
        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    promote.set_display_name("promote")
    promote.set_caching_options(False)

    with dsl.If(promote.outputs["Output"] != "pass", name="promotion-refused"):
        blocked = gate_blocked(verdict=promote.outputs["verdict"])
        blocked.set_display_name("gate-blocked")
        blocked.set_caching_options(False)
    return promote.outputs["Output"]
