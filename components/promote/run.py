"""The one entry the CLI and the KFP component both call: options in, a recorded (and signed) verdict out."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from skewgate.common.errors import InputError
from skewgate.common.recording import TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict

STEP = "promote"
# What a release needs by default: every gate of the release-gate pipeline.
REQUIRED_STEPS: tuple[str, ...] = ("export", "calibrate", "drift", "parity", "probe", "compare")
# Every step that writes a verdict promote can require (the names its verdicts carry as `step`).
STEPS: tuple[str, ...] = (*REQUIRED_STEPS, "preprocess")
# The release-gate pipeline's task names (pipelines/release_gate.py), accepted for the step each task runs.
TASK_NAMES: dict[str, str] = {"calibrate-int8": "calibrate", "drift-gate": "drift", "parity-diff": "parity",
                              "triton-probe": "probe", "compare-champion": "compare"}


@dataclass(frozen=True, kw_only=True)
class PromoteOptions:
    """Every default of `skewgate promote` and `promote_op` lives here (the files are `run`'s arguments)."""

    alias: str = "champion"
    required: tuple[str, ...] = REQUIRED_STEPS
    allow_warn: bool = False
    trusted_keys: tuple[str, ...] = ()  # public key files; $SKEWGATE_TRUSTED_KEYS adds more
    allow_unsigned: bool = False  # local experiments only: evidence then needs no signature
    version: str | None = None  # promote this registered version instead of finding or registering one
    example_rows: int = 2  # rows of `example_inputs` that become the registered model's input example


def split_steps(text: str) -> tuple[str, ...]:
    """`export, drift` → ("export", "drift"): the `--require` / `required_steps` spelling."""
    return tuple(s.strip() for s in text.split(",") if s.strip())


class UnknownStep(InputError):
    """A required step that no step is called: named with the closest valid name and the list of valid ones."""

    def __init__(self, name: str, *, source: str) -> None:
        valid = [*STEPS, *TASK_NAMES]
        super().__init__(source, expected=f"one of {', '.join(valid)}", found=f"unknown step {name!r}")
        close = difflib.get_close_matches(name.lower(), valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        self.args = (f"unknown step {name!r} in {source}{hint} valid: {', '.join(STEPS)} "
                     f"(or the pipeline's task names {', '.join(TASK_NAMES)})",)


def resolve_steps(names: Iterable[str], *, source: str = "the required steps") -> tuple[str, ...]:
    """The step names `names` mean, in order, each once: a pipeline task name (`triton-probe`) stands for its step
    (`probe`); any other unknown name is an `UnknownStep` (which names `source`, e.g. `--require`)."""
    resolved: list[str] = []
    for name in names:
        key = name.strip().lower()
        step = key if key in STEPS else TASK_NAMES.get(key)
        if step is None:
            raise UnknownStep(name, source=source)
        if step not in resolved:
            resolved.append(step)
    return tuple(resolved)


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
        int8: Path | None = None, example_inputs: Path | None = None) -> Verdict:
    """Promote `onnx` as `model_name` on the evidence in `verdicts_dir`, inside the step's MLflow run; the verdict
    says what happened (never raises). `int8`: calibrate's INT8 model, registered beside as `<model_name>-int8`;
    `example_inputs`: the .npz whose first rows become the registered model's input example. Required steps are
    checked first: an unknown one is an `error` verdict before MLflow or the registry is touched."""
    try:
        required = resolve_steps(options.required)
    except InputError as err:
        return Verdict.error(STEP, str(err))

    def evaluate(step_run: object) -> Verdict:
        from skewgate.common import attest
        from skewgate.common.errors import InputError
        from skewgate.common.mlflow_log import MlflowRegistry, StepRun
        from skewgate.promote.core import Policy, input_example, promote

        if not isinstance(step_run, StepRun):
            raise InputError("--tracking-uri", expected="an MLflow tracking URI (promotion needs a registry)",
                             found="none (set --tracking-uri or MLFLOW_TRACKING_URI)")
        trusted = attest.load_trusted_keys(attest.trusted_key_paths(options.trusted_keys))
        policy = Policy(required=required, allow_warn=options.allow_warn,
                        trusted_keys=trusted, allow_unsigned=options.allow_unsigned,
                        pipeline_run_id=tracking.pipeline_run_id)
        example = (input_example(example_inputs, onnx, rows=options.example_rows)
                   if example_inputs is not None else None)
        return promote(model_name=model_name, onnx=onnx, verdicts_dir=verdicts_dir,
                       registry=MlflowRegistry(step_run, input_example=example), alias=options.alias,
                       policy=policy, version=options.version,
                       signing_key=attest.signing_key_from_env(tracking.signing_key or None), int8=int8)

    return evaluate_and_record(STEP, evaluate, tracking)
