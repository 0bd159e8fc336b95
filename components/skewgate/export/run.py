"""The one entry the CLI and the KFP component both call: files and options in, a recorded (and signed)
verdict out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict

STEP = "export"


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """Every default of `skewgate export` and `export_op` lives here."""

    # `OUTPUT=RTOL,ATOL` overrides of the dtype-default tolerance, one output each (read by `core.tolerances`)
    tolerances: tuple[str, ...] = ()
    max_samples: int = 64  # examples compared and run alone for batch invariance (bounds its cost)
    allow_pickle: bool = False  # MLflow pytorch URIs unpickle code: trusted registries only
    # `IN=OUT` state pairs of a step model (each item may hold several, comma-separated): IN a program input, OUT
    # an output of the exported ONNX by name or as `#K` (its position); the `state.*` checks judge the pairs
    states: tuple[str, ...] = ()


def run(*, model: str | Path, inputs: str | Path, out: str | Path, options: ExportOptions,
        tracking: TrackingOptions) -> StepResult:
    """Export `model` to `out` and judge it inside the step's MLflow run (never raises: `error` verdict)."""

    def evaluate(_run: object) -> Verdict:
        from skewgate.export.core import export_model

        return export_model(model=model, inputs=inputs, out=out, options=options).judged_with(options)

    return evaluate_and_record(STEP, evaluate, tracking, settings=options, inputs={"inputs": inputs, "model": model})
