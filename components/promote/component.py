"""KFP component for promote: verdict artifacts + the ONNX model in, registry alias moved (or not) out."""

from kfp import dsl

from skewgate.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def promote_op(
    onnx_model: dsl.Input[dsl.Model],
    export_verdict: dsl.Input[dsl.Artifact],
    drift_verdict: dsl.Input[dsl.Artifact],
    probe_verdict: dsl.Input[dsl.Artifact],
    parity_verdict: dsl.Input[dsl.Artifact],
    calibrate_verdict: dsl.Input[dsl.Artifact],
    compare_verdict: dsl.Input[dsl.Artifact],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    alias: str = "champion",
    required_steps: str = "export,calibrate,drift,parity,probe,compare",
    allow_warn: bool = False,
    pipeline_run_id: str = "",
) -> str:
    """Promote only on complete, matching evidence; returns `pass` (promoted) or `fail` (refused)."""
    import shutil
    import tempfile

    from skewgate.common.kfp_io import finish
    from skewgate.common.mlflow_log import MlflowRegistry
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.promote.core import promote

    with tempfile.TemporaryDirectory() as verdicts_dir:
        verdicts = {"export": export_verdict, "calibrate": calibrate_verdict, "drift": drift_verdict,
                    "parity": parity_verdict, "probe": probe_verdict, "compare": compare_verdict}
        for step, artifact in verdicts.items():
            shutil.copy(artifact.path, f"{verdicts_dir}/{step}.json")
        result = evaluate_and_record(
            "promote",
            lambda run: promote(model_name=model_name, onnx=onnx_model.path, verdicts_dir=verdicts_dir,
                                registry=MlflowRegistry(run), alias=alias, allow_warn=allow_warn,
                                required=[s.strip() for s in required_steps.split(",") if s.strip()]),
            TrackingOptions(uri=tracking_uri, experiment=model_name, pipeline_run_id=pipeline_run_id),
        )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def gate_blocked(verdict: dsl.Input[dsl.Artifact]) -> None:
    """Fails the run when promotion was refused, so that the run's state (and alerting) shows the block."""
    from skewgate.common.verdict import Verdict

    refused = Verdict.read(verdict.path)
    raise RuntimeError(f"promotion refused: {refused.message}")
