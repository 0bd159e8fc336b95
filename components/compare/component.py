"""KFP component for compare: candidate ONNX + labelled eval data in, verdict + champion-vs-candidate table out."""

from kfp import dsl

from skewgate.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def compare_op(
    onnx_model: dsl.Input[dsl.Model],
    eval_data: dsl.Input[dsl.Dataset],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    comparison: dsl.Output[dsl.Markdown],
    alias: str = "champion",
    task: str = "auto",
    thresholds: str = "",
    confidence: float = 0.95,
    max_churn: float = -1.0,
    pipeline_run_id: str = "",
) -> str:
    """Judge the candidate against the `alias` version of `model_name`; `thresholds` as `skewgate compare
    --threshold` (`;`-separated), `max_churn` < 0: churn reported, not gated. Returns the verdict status.
    Defaults equal `CompareOptions` (KFP needs them spelled out; a test holds them equal)."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.compare.run import options_from_parameters, run

    options = options_from_parameters(alias=alias, task=task, thresholds=thresholds, confidence=confidence,
                                      max_churn=max_churn)
    result = run(onnx=onnx_model.path, model_name=model_name, eval_data=eval_data.path, markdown=comparison.path,
                 options=options,
                 tracking=TrackingOptions(uri=tracking_uri, experiment=model_name, pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
