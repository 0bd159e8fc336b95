"""KFP component for export: artifacts in, ONNX model + verdict + metrics + Markdown report out."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def export_op(
    model: dsl.Input[dsl.Model],
    example_inputs: dsl.Input[dsl.Dataset],
    onnx_model: dsl.Output[dsl.Model],
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
    max_samples: int = 64,
    tolerances: str = "",
    states: str = "",
) -> str:
    """Export the .pt2 to ONNX and judge it; returns the verdict status. Raises when it could not evaluate.

    Defaults equal `ExportOptions` (KFP needs them spelled out; a test holds them equal).

    Args:
        model: Candidate torch.export `.pt2` program.
        example_inputs: `.npz` of example inputs named as the model's inputs.
        onnx_model: The exported FP32 ONNX model.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict (promote's evidence).
        tracking_uri: MLflow tracking URI where the step logs its run and verdict (empty: no MLflow).
        experiment: MLflow experiment of the step's run.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
        max_samples: Example inputs compared between PyTorch and ONNX Runtime.
        tolerances: `OUTPUT=RTOL,ATOL` overrides as `skewgate export --tolerance`, `;`-separated (empty: the
            defaults).
        states: `IN=OUT` state pairs of a step model as `skewgate export --state`, comma-separated (empty: not a
            step model).
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.export.run import ExportOptions, run

    result = run(model=model.path, inputs=example_inputs.path, out=onnx_model.path,
                 options=ExportOptions(tolerances=(tolerances,) if tolerances else (), max_samples=max_samples,
                                       states=(states,) if states else ()),
                 tracking=TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
