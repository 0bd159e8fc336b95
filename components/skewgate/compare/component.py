"""KFP component for compare: candidate ONNX + labelled eval data in, verdict + champion-vs-candidate table out."""

from kfp import dsl

from skewgate.common.images import IMAGE


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
    max_churn: str = "",
    labels_key: str = "labels",
    pipeline_run_id: str = "",
) -> str:
    """Judge the candidate against the `alias` version of `model_name`; `thresholds` as `skewgate compare
    --threshold` (`;`-separated), `max_churn` empty: churn reported, not gated. Returns the verdict status.
    Defaults equal `CompareOptions` (KFP needs them spelled out; a test holds them equal).

    Args:
        onnx_model: Candidate ONNX model written by export.
        eval_data: Labelled `.npz` evaluation data (the `labels_key` array, optional `slices`).
        model_name: MLflow registered model whose `alias` version is the champion (also the experiment).
        tracking_uri: MLflow tracking URI of the registry and the step's run.
        verdict: The step's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        attestation: The signed envelope of the verdict (promote's evidence).
        comparison: Champion-vs-candidate table (Markdown).
        alias: Registry alias of the version to compare with.
        task: auto, classification, segmentation, embedding or regression.
        thresholds: Metric thresholds as `skewgate compare --threshold`, `;`-separated (empty: the defaults).
        confidence: Level of the bootstrap interval on each difference.
        max_churn: Largest share of changed top-1 answers, in [0, 1] (empty: reported, not gated).
        labels_key: Name of the array of `eval_data` that holds the labels.
        pipeline_run_id: KFP pipeline run id that groups the steps' MLflow runs under one parent run.
    """
    from skewgate.common.errors import InputError
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, record_refusal
    from skewgate.compare.run import options_from_parameters, run

    tracking = TrackingOptions(uri=tracking_uri, experiment=model_name, pipeline_run_id=pipeline_run_id)
    outputs = {"verdict_artifact": verdict, "metrics": metrics, "report": report, "attestation": attestation}
    try:  # a parameter that does not parse is the step's error verdict, recorded as any other
        options = options_from_parameters(alias=alias, task=task, thresholds=thresholds, confidence=confidence,
                                          max_churn=max_churn, labels_key=labels_key)
    except InputError as err:
        return finish(record_refusal("compare", err, tracking, parameters={"max_churn": max_churn}), **outputs)
    result = run(onnx=onnx_model.path, model_name=model_name, eval_data=eval_data.path, markdown=comparison.path,
                 options=options, tracking=tracking)
    return finish(result, **outputs)
