"""The one entry the CLI and the KFP component call: the two callables and the raw samples in, a recorded (and
signed) verdict out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.compare import Tolerance

STEP = "preprocess"


@dataclass(frozen=True, kw_only=True)
class PreprocessOptions:
    """Every default of `skewgate preprocess` and `preprocess_op` lives here."""

    array: str | None = None  # which array of the raw .npz (None: the first)
    tolerance: Tolerance | None = None  # None: the tolerance of the training output's dtype


def run(*, train: str, serve: str, raw: str | Path, options: PreprocessOptions,
        tracking: TrackingOptions) -> StepResult:
    """Run the `train` and the `serve` callables (`module:function`, raw array in, array out; imported here:
    trusted code only) on `raw` and judge them inside the step's MLflow run. Never raises: `error` verdict."""

    def evaluate(_run: object) -> Verdict:
        from skewgate.preprocess.core import preprocess_parity

        return preprocess_parity(train=train, serve=serve, raw=raw, array=options.array,
                                 tolerance=options.tolerance).judged_with(options)

    return evaluate_and_record(STEP, evaluate, tracking, settings=options, inputs={"raw": raw})
