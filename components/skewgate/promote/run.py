"""The one entry the CLI and the KFP component both call: options in, a recorded (and signed) verdict out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from skewgate.common.errors import InputError
from skewgate.common.policy import STREAM_CHECKS, GatePolicy, load_policy
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.steps import (
    DEFAULT_ALIAS,
    RELEASE_GATE_STEPS,
    STEPS,
    TASK_NAMES,
    UnknownStep,
    resolve_steps,
    split_steps,
)
from skewgate.common.verdict import Verdict

__all__ = ["REQUIRED_STEPS", "STEPS", "TASK_NAMES", "PromoteOptions", "UnknownStep", "gather_verdicts",
           "resolve_steps", "run", "split_steps"]

STEP = "promote"
# What a release needs by default (common/steps.py holds the step names promote and verify share)
REQUIRED_STEPS = RELEASE_GATE_STEPS


@dataclass(frozen=True, kw_only=True)
class PromoteOptions:
    """Every default of `skewgate promote` and `promote_op` lives here (the files are `run`'s arguments)."""

    alias: str = DEFAULT_ALIAS
    required: tuple[str, ...] = REQUIRED_STEPS
    allow_warn: bool = False
    trusted_keys: tuple[str, ...] = ()  # public key files; $SKEWGATE_TRUSTED_KEYS adds more
    allow_unsigned: bool = False  # local experiments only: evidence then needs no signature
    version: str | None = None  # promote this registered version instead of finding or registering one
    example_rows: int = 2  # rows of `example_inputs` that become the registered model's input example
    # a policy file (JSON or YAML: common/policy.py): its `required` and `allow_warn`, when it names them, win over
    # the two above; "" = the release gate's defaults, where a verdict judged more loosely than its step's
    # defaults is refused
    policy: str = ""


def gather_verdicts(found: Mapping[str, tuple[str | Path, str | Path]], folder: Path) -> Path:
    """Lay out step → (verdict, envelope) files as promote reads them: `<step>.json` beside
    `<step>.intoto.jsonl` in `folder` (KFP hands each artifact over under its own path). Each is copied as a
    regular file of bounded size (a FIFO or a device is an `InputError`, not an endless copy)."""
    from skewgate.common import attest
    from skewgate.common.io import read_regular_file
    from skewgate.common.verdict import MAX_VERDICT_BYTES

    folder.mkdir(parents=True, exist_ok=True)
    for step, (verdict, envelope) in found.items():
        (folder / f"{step}.json").write_bytes(
            read_regular_file(verdict, limit=MAX_VERDICT_BYTES, expected="a verdict JSON file"))
        (folder / f"{step}{attest.ENVELOPE_SUFFIX}").write_bytes(
            read_regular_file(envelope, limit=attest.MAX_ENVELOPE_BYTES, expected="a DSSE envelope"))
    return folder


def run(*, model_name: str, onnx: Path, verdicts_dir: Path, options: PromoteOptions, tracking: TrackingOptions,
        int8: Path | None = None, step: Path | None = None, example_inputs: Path | None = None) -> StepResult:
    """Promote `onnx` as `model_name` on the evidence in `verdicts_dir`, inside the step's MLflow run; the verdict
    says what happened (never raises). `int8`: calibrate's INT8 model, registered beside as `<model_name>-int8`;
    `step`: a stateful model's STEP model (served step by step), registered beside as `<model_name>-step`; parity's
    and probe's verdicts must then hold their stream checks (`common.policy.STREAM_CHECKS`), whatever the policy
    says; `example_inputs`: the .npz whose first rows become the registered model's input example. Required steps and
    the policy file are checked first, with the model name and the alias: a bad one is an `error` verdict before
    MLflow or the registry is touched. Runs of this experiment left RUNNING by a process that is gone are ended
    (KILLED) first."""
    from skewgate.common import attest
    from skewgate.promote.core import INT8_SUFFIX, STEP_SUFFIX, validate_target

    try:
        required = resolve_steps(options.required)
        gates = (load_policy(options.policy, required=required, allow_warn=options.allow_warn) if options.policy
                 else GatePolicy(required=required, allow_warn=options.allow_warn)).promoting(options.alias)
        if step is not None:
            gates = gates.requiring(STREAM_CHECKS)
        validate_target(model_name, options.alias)
        for suffix, companion in ((INT8_SUFFIX, int8), (STEP_SUFFIX, step)):
            if companion is not None:
                validate_target(f"{model_name}{suffix}", options.alias)
        trusted = gates.trusted(attest.load_trusted_keys(attest.trusted_key_paths(options.trusted_keys)))
        if not trusted and not options.allow_unsigned:  # as verify: no key to judge by is a setup mistake
            raise InputError("--trusted-key", expected="at least one trusted public key (or --allow-unsigned, "
                             "local experiments only)", found=f"none (no --trusted-key, ${attest.TRUSTED_KEYS_ENV} "
                             "unset)")
    except InputError as err:
        return StepResult(Verdict.error(STEP, str(err)))

    def evaluate(step_run: object) -> Verdict:
        from skewgate.common.errors import InputError
        from skewgate.common.mlflow_log import MlflowRegistry, StepRun, end_stale_runs
        from skewgate.promote.core import Policy, input_example, promote

        if not isinstance(step_run, StepRun):
            raise InputError("--tracking-uri", expected="an MLflow tracking URI (promotion needs a registry)",
                             found="none (set --tracking-uri or MLFLOW_TRACKING_URI)")
        end_stale_runs(step_run.tracking, current_run_id=step_run.run_id,
                       pipeline_run_id=tracking.pipeline_run_id)
        policy = Policy(gates=gates, trusted_keys=trusted, allow_unsigned=options.allow_unsigned,
                        pipeline_run_id=tracking.pipeline_run_id)
        example = (input_example(example_inputs, onnx, rows=options.example_rows)
                   if example_inputs is not None else None)
        return promote(model_name=model_name, onnx=onnx, verdicts_dir=verdicts_dir,
                       registry=MlflowRegistry(step_run, input_example=example), alias=options.alias,
                       policy=policy, version=options.version,
                       signing_key=attest.signing_key_from_env(tracking.signing_key or None), int8=int8,
                       step=step).judged_with(options)

    return evaluate_and_record(STEP, evaluate, tracking, settings=options, inputs={
        "onnx": onnx, "verdicts": verdicts_dir, "int8": int8, "step": step, "example_inputs": example_inputs})
