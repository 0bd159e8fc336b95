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
) -> str:
    """Export the .pt2 to ONNX and judge it; returns the verdict status. Raises when it could not evaluate."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.export.core import export_model

    result = evaluate_and_record(
        "export",
        lambda _run: export_model(model=model.path, inputs=example_inputs.path, out=onnx_model.path,
                                  max_samples=max_samples),
        TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
