"""KFP component for verify: re-check a registry alias's signed evidence before a deployment loads it."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def verify_op(
    model_name: str,
    tracking_uri: str,
    trusted_public_keys: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    alias: str = "champion",
    required_steps: str = "export,calibrate,drift,parity,probe,compare",
    mlflow_deadline: float = 30.0,
    policy: str = "",
) -> str:
    """Re-check the `alias` version of `model_name`: the file its MLmodel loads has the gated digest, promote's
    signed decision names this model, version and alias under a policy that required at least `required_steps`
    (comma-separated), and every required step's signed verdict holds, against `trusted_public_keys` (PEM text,
    one or several keys). Returns `pass` or `fail`; a registry that cannot be read within `mlflow_deadline`
    seconds fails the task.

    Args:
        model_name: MLflow registered model to check.
        tracking_uri: MLflow tracking URI of the registry.
        trusted_public_keys: PEM public keys (one or several, concatenated) whose signatures count.
        verdict: The verification's verdict (JSON).
        metrics: The verdict's figures as KFP metrics.
        report: The verdict as Markdown.
        alias: Registry alias of the version to check.
        required_steps: Comma-separated steps promote's policy must have required, at least.
        mlflow_deadline: Seconds to read the registry before the task fails.
        policy: Policy (JSON or YAML text, as a `--policy` file holds): required steps and the loosest setting each
            stored verdict may have been judged with; empty: the release gate's defaults.
    """
    import tempfile
    from pathlib import Path

    from skewgate.common.attest import write_trusted_keys
    from skewgate.common.kfp_io import finish
    from skewgate.common.policy import write_policy
    from skewgate.common.recording import TrackingOptions
    from skewgate.common.steps import split_steps
    from skewgate.verify.run import VerifyOptions, run

    with tempfile.TemporaryDirectory() as work:
        options = VerifyOptions(alias=alias, trusted_keys=write_trusted_keys(trusted_public_keys, Path(work)),
                                required=split_steps(required_steps), policy=write_policy(policy, Path(work)))
        result = run(model_name=model_name, options=options,
                     tracking=TrackingOptions(uri=tracking_uri, deadline_s=mlflow_deadline))
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)
