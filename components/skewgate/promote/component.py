"""KFP component for promote: verdict + attestation artifacts and the ONNX model in, registry alias moved (or
not) out."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def promote_op(
    onnx_model: dsl.Input[dsl.Model],
    int8_model: dsl.Input[dsl.Model],
    example_inputs: dsl.Input[dsl.Dataset],
    export_verdict: dsl.Input[dsl.Artifact],
    export_attestation: dsl.Input[dsl.Artifact],
    drift_verdict: dsl.Input[dsl.Artifact],
    drift_attestation: dsl.Input[dsl.Artifact],
    probe_verdict: dsl.Input[dsl.Artifact],
    probe_attestation: dsl.Input[dsl.Artifact],
    parity_verdict: dsl.Input[dsl.Artifact],
    parity_attestation: dsl.Input[dsl.Artifact],
    calibrate_verdict: dsl.Input[dsl.Artifact],
    calibrate_attestation: dsl.Input[dsl.Artifact],
    compare_verdict: dsl.Input[dsl.Artifact],
    compare_attestation: dsl.Input[dsl.Artifact],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    attestation: dsl.Output[dsl.Artifact],
    trusted_public_keys: str = "",
    allow_unsigned: bool = False,
    alias: str = "champion",
    required_steps: str = "export,calibrate,drift,parity,probe,compare",
    allow_warn: bool = False,
    pipeline_run_id: str = "",
    policy: str = "",
    stream_model: dsl.Input[dsl.Model] = None,  # KFP: an optional input artifact
    estimate_verdict: dsl.Input[dsl.Artifact] = None,  # optional, with its attestation
    estimate_attestation: dsl.Input[dsl.Artifact] = None,
) -> str:
    """Promote only on complete, matching, signed evidence; returns `pass` (promoted) or `fail` (refused). (Long:
    KFP shows each of the eighteen artifacts' `Args` line in its UI.)

    Defaults equal `PromoteOptions` (KFP needs them spelled out; a test holds them equal).

    Args:
        onnx_model: FP32 ONNX model written by export (registered on promotion).
        int8_model: INT8 ONNX model written by calibrate (logged with the registered version).
        example_inputs: `.npz` of example inputs (the registered model's input example and signature).
        export_verdict: Export's verdict.
        export_attestation: Export's signed envelope.
        drift_verdict: Drift's verdict.
        drift_attestation: Drift's signed envelope.
        probe_verdict: The Triton probe's verdict.
        probe_attestation: The Triton probe's signed envelope.
        parity_verdict: Parity's verdict.
        parity_attestation: Parity's signed envelope.
        calibrate_verdict: Calibrate's verdict.
        calibrate_attestation: Calibrate's signed envelope.
        compare_verdict: Compare's verdict.
        compare_attestation: Compare's signed envelope.
        model_name: MLflow registered model to promote into (also the experiment).
        tracking_uri: MLflow tracking URI of the registry and the step's run.
        verdict: Promote's decision (JSON).
        metrics: The decision's figures as KFP metrics.
        report: The decision as Markdown.
        attestation: The signed envelope of the decision.
        trusted_public_keys: PEM public keys (one or several, concatenated) whose signatures count.
        allow_unsigned: Accept unsigned evidence (local experiments only: anyone could have written it).
        alias: Registry alias moved to the promoted version.
        required_steps: Comma-separated steps whose passing verdict is required.
        allow_warn: Promote on `warn` verdicts too (default: only `pass`).
        pipeline_run_id: KFP pipeline run id; every verdict must have been logged in this run.
        policy: Policy (JSON or YAML text, as a `--policy` file holds): required steps and the loosest setting each
            verdict may have been judged with; empty: the release gate's defaults.
        stream_model: A stateful model's STEP model (served step by step), if any: the probe's verdict must be
            about it, parity's and probe's verdicts must hold their stream checks; registered as `<model_name>-step`.
        estimate_verdict: The estimate's verdict, if estimated (judged like the others when `estimate` is required;
            its estimate profile is then recorded with the version for the nightly estimate).
        estimate_attestation: The estimate's signed envelope (with `estimate_verdict`).
    """
    import tempfile
    from pathlib import Path

    from skewgate.common.attest import write_trusted_keys
    from skewgate.common.kfp_io import finish
    from skewgate.common.policy import write_policy
    from skewgate.common.recording import TrackingOptions
    from skewgate.promote.run import PromoteOptions, gather_verdicts, run, split_steps

    found = {"export": (export_verdict.path, export_attestation.path),
             "calibrate": (calibrate_verdict.path, calibrate_attestation.path),
             "drift": (drift_verdict.path, drift_attestation.path),
             "parity": (parity_verdict.path, parity_attestation.path),
             "probe": (probe_verdict.path, probe_attestation.path),
             "compare": (compare_verdict.path, compare_attestation.path)}
    if estimate_verdict is not None and estimate_attestation is not None:
        found["estimate"] = (estimate_verdict.path, estimate_attestation.path)
    with tempfile.TemporaryDirectory() as work:
        verdicts_dir = gather_verdicts(found, Path(work) / "verdicts")
        options = PromoteOptions(alias=alias, required=split_steps(required_steps), allow_warn=allow_warn,
                                 trusted_keys=write_trusted_keys(trusted_public_keys, Path(work)),
                                 allow_unsigned=allow_unsigned, policy=write_policy(policy, Path(work)))
        result = run(model_name=model_name, onnx=Path(onnx_model.path), verdicts_dir=verdicts_dir, options=options,
                     tracking=TrackingOptions(uri=tracking_uri, experiment=model_name,
                                              pipeline_run_id=pipeline_run_id),
                     int8=Path(int8_model.path), step=Path(stream_model.path) if stream_model else None,
                     example_inputs=Path(example_inputs.path))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)
