"""KFP component for export: artifacts in, ONNX model + verdict + metrics + Markdown report out."""

from kfp import dsl

from skewgate.images import IMAGE


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
) -> str:
    """Export the .pt2 to ONNX and judge it; returns the verdict status. Raises when it could not evaluate.

    `tolerances`: `OUTPUT=RTOL,ATOL` overrides as `skewgate export --tolerance`, `;`-separated. Defaults equal
    `ExportOptions` (KFP needs them spelled out; a test holds them equal).
    """
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.export.run import ExportOptions, run

    result = run(model=model.path, inputs=example_inputs.path, out=onnx_model.path,
                 options=ExportOptions(tolerances=(tolerances,) if tolerances else (), max_samples=max_samples),
                 tracking=TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
