"""KFP component for verify: re-check a registry alias's signed evidence before a deployment loads it."""

from kfp import dsl

from skewgate.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def verify_op(
    model_name: str,
    tracking_uri: str,
    trusted_public_keys: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    alias: str = "champion",
) -> str:
    """Re-check the `alias` version of `model_name`: the registered ONNX digest, promote's signed decision and
    every required step's signed verdict, against `trusted_public_keys` (PEM text, one or several keys).
    Returns `pass` or `fail`; a registry that cannot be read fails the task."""
    import tempfile
    from pathlib import Path

    from skewgate.common.attest import write_trusted_keys
    from skewgate.common.kfp_io import finish
    from skewgate.verify.run import VerifyOptions, run

    with tempfile.TemporaryDirectory() as work:
        result = run(model_name=model_name, tracking_uri=tracking_uri,
                     options=VerifyOptions(alias=alias, trusted_keys=write_trusted_keys(trusted_public_keys,
                                                                                        Path(work))))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)
