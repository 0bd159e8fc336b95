"""The one entry the CLI and the KFP component both call: options in, a recorded (and signed) verdict out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skewgate.common.recording import TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict
from skewgate.promote.core import REQUIRED_STEPS

STEP = "promote"


@dataclass(frozen=True, kw_only=True)
class PromoteOptions:
    """Every default of `skewgate promote` and `promote_op` lives here."""

    model_name: str
    onnx: Path
    verdicts_dir: Path
    alias: str = "champion"
    required: tuple[str, ...] = REQUIRED_STEPS
    allow_warn: bool = False
    trusted_keys: tuple[str, ...] = ()  # public key files; $SKEWGATE_TRUSTED_KEYS adds more
    allow_unsigned: bool = False  # local experiments only: evidence then needs no signature
    version: str | None = None
    example_inputs: Path | None = None  # .npz whose first rows become the registered model's input example
    int8: Path | None = None  # calibrate's INT8 model, registered beside as `<model_name>-int8`
    example_rows: int = 2


def run(options: PromoteOptions, tracking: TrackingOptions) -> Verdict:
    """Promote inside the step's MLflow run; the verdict says what happened (never raises)."""

    def evaluate(step_run: object) -> Verdict:
        from skewgate.common import attest
        from skewgate.common.errors import InputError
        from skewgate.common.mlflow_log import MlflowRegistry, StepRun
        from skewgate.promote.core import Policy, input_example, promote

        if not isinstance(step_run, StepRun):
            raise InputError("--tracking-uri", expected="an MLflow tracking URI (promotion needs a registry)",
                             found="none (set --tracking-uri or MLFLOW_TRACKING_URI)")
        trusted = attest.load_trusted_keys(attest.trusted_key_paths(options.trusted_keys))
        policy = Policy(required=options.required, allow_warn=options.allow_warn,
                        trusted_keys=trusted, allow_unsigned=options.allow_unsigned,
                        pipeline_run_id=tracking.pipeline_run_id)
        example = (input_example(options.example_inputs, options.onnx, rows=options.example_rows)
                   if options.example_inputs else None)
        return promote(model_name=options.model_name, onnx=options.onnx, verdicts_dir=options.verdicts_dir,
                       registry=MlflowRegistry(step_run, input_example=example), alias=options.alias,
                       policy=policy, version=options.version,
                       signing_key=attest.signing_key_from_env(tracking.signing_key or None), int8=options.int8)

    return evaluate_and_record(STEP, evaluate, tracking)
