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
    """
    import re
    import shutil
    import tempfile
    from pathlib import Path

    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions
    from skewgate.promote.run import PromoteOptions, run

    with tempfile.TemporaryDirectory() as work:
        verdicts_dir, keys = Path(work) / "verdicts", []
        verdicts_dir.mkdir()
        for step, (found, signed) in {"export": (export_verdict, export_attestation),
                                      "calibrate": (calibrate_verdict, calibrate_attestation),
                                      "drift": (drift_verdict, drift_attestation),
                                      "parity": (parity_verdict, parity_attestation),
                                      "probe": (probe_verdict, probe_attestation),
                                      "compare": (compare_verdict, compare_attestation)}.items():
            shutil.copy(found.path, verdicts_dir / f"{step}.json")
            shutil.copy(signed.path, verdicts_dir / f"{step}.intoto.jsonl")
        pems = re.findall(r"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", trusted_public_keys, re.S)
        for index, pem in enumerate(pems):
            keys.append(Path(work) / f"trusted-{index}.pub")
            keys[-1].write_text(pem + "\n", encoding="utf-8")
        options = PromoteOptions(
            model_name=model_name, onnx=Path(onnx_model.path), verdicts_dir=verdicts_dir, alias=alias,
            required=tuple(s.strip() for s in required_steps.split(",") if s.strip()), allow_warn=allow_warn,
            trusted_keys=tuple(str(k) for k in keys), allow_unsigned=allow_unsigned,
            example_inputs=Path(example_inputs.path), int8=Path(int8_model.path))
        result = run(options, TrackingOptions(uri=tracking_uri, experiment=model_name,
                                              pipeline_run_id=pipeline_run_id))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report, attestation=attestation)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def gate_blocked(verdict: dsl.Input[dsl.Artifact]) -> None:
    """Fails the run when promotion was refused, so that the run's state (and alerting) shows the block."""
    from skewgate.common.verdict import Verdict

    refused = Verdict.read(verdict.path)
    raise RuntimeError(f"promotion refused: {refused.message}")
