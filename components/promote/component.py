"""KFP component for promote: verdict + attestation artifacts and the ONNX model in, registry alias moved (or
not) out."""

from kfp import dsl

from skewgate.images import IMAGE


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
) -> str:
    """Promote only on complete, matching, signed evidence; returns `pass` (promoted) or `fail` (refused).

    `trusted_public_keys` holds PEM public keys (one or several, concatenated): the signatures that count.
    Defaults equal `PromoteOptions` (KFP needs them spelled out; a test holds them equal).
    """
    import tempfile
    from pathlib import Path

    from skewgate.common.attest import write_trusted_keys
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.promote.run import PromoteOptions, gather_verdicts, run, split_steps

    with tempfile.TemporaryDirectory() as work:
        verdicts_dir = gather_verdicts({"export": (export_verdict.path, export_attestation.path),
                                        "calibrate": (calibrate_verdict.path, calibrate_attestation.path),
                                        "drift": (drift_verdict.path, drift_attestation.path),
                                        "parity": (parity_verdict.path, parity_attestation.path),
                                        "probe": (probe_verdict.path, probe_attestation.path),
                                        "compare": (compare_verdict.path, compare_attestation.path)},
                                       Path(work) / "verdicts")
        options = PromoteOptions(alias=alias, required=split_steps(required_steps), allow_warn=allow_warn,
                                 trusted_keys=write_trusted_keys(trusted_public_keys, Path(work)),
                                 allow_unsigned=allow_unsigned)
        result = run(model_name=model_name, onnx=Path(onnx_model.path), verdicts_dir=verdicts_dir, options=options,
                     tracking=TrackingOptions(uri=tracking_uri, experiment=model_name,
                                              pipeline_run_id=pipeline_run_id),
                     int8=Path(int8_model.path), example_inputs=Path(example_inputs.path))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def gate_blocked(verdict: dsl.Input[dsl.Artifact]) -> None:
    """Fails the run when promotion was refused, so that the run's state (and alerting) shows the block."""
    from skewgate.common.verdict import Verdict

    refused = Verdict.read(verdict.path)
    raise RuntimeError(f"promotion refused: {refused.message}")
