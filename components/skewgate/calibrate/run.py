"""The one entry the CLI and the KFP component call: files and options in, a recorded (and signed) verdict out —
calibrate (core.py), then write the picture and the HTML where asked and, with tracking, log them and the tables
(tensors, trials, per-layer SQNR) to the step's MLflow run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.calibrate.core import CalibrationResult
    from skewgate.calibrate.int8.budget import Budget
    from skewgate.calibrate.int8.ranges import Method
    from skewgate.common.mlflow_log import StepRun
    from skewgate.common.output_tasks import Task

STEP = "calibrate"
ARTIFACT_NAMES = ("plot_name", "html_name")  # how the pictures are logged, not how the model was judged


@dataclass(frozen=True, kw_only=True)
class CalibrateOptions:
    """Every default of `skewgate calibrate` and `calibrate_op` lives here (the files are `run`'s arguments)."""

    method: Method = "auto"  # a KFP parameter arrives as any string: `core.calibrate` checks it first
    max_accuracy_drop: float = 0.01  # accuracy points with labels, else the share of positions INT8 harmed
    # the same agreement limit as `parity --int8` (common/output_tasks.py): top-1 for classes, else cosine/error
    min_top1_agreement: float = 0.99
    task: Task = "auto"  # per output: classification|segmentation|embedding|regression, or read from its shape
    class_axis: int | None = None  # None: inferred (the labels' shape, else axis 1 of rank ≥ 4, else the last)
    output_tasks: Mapping[str, str] = field(default_factory=dict)  # output name → "TASK[:AXIS]", over `task`
    min_cosine_similarity: float = 0.99  # embedding: a sample below this cosine to FP32 is harmed
    max_regression_error: float = 0.05  # regression: a value moved by more than this share of its spread is harmed
    max_fallback_layers: int = 8
    batch_size: int = 32
    min_calibration_samples: int = 32
    per_channel: bool = True
    equalize: bool = True
    outlier_ratio: float = 10.0  # max / p99.99 from which a tensor is flagged
    max_uncovered: float = 0.01  # eval values beyond the range, in excess of what calibration itself clipped
    min_int8_mac_share: float = 0.8  # below: warn, the written model is mostly FP32
    # the names the plot and the HTML report are logged under in the step run (KFP output paths have none; the
    # CLI's are the files' own: empty)
    plot_name: str = "calibration_histograms.png"
    html_name: str = "calibration_report.html"

    def budget(self) -> Budget:
        from skewgate.calibrate.int8.budget import Budget

        return Budget(self.max_accuracy_drop, self.min_top1_agreement, self.max_fallback_layers, self.batch_size)

    def judged_settings(self) -> dict[str, Any]:
        """What a verdict says it was judged with (`Verdict.judged_with`): every option but the artifact names."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ARTIFACT_NAMES}


def run(*, onnx: str | Path, calibration: str | Path, eval_data: str | Path, out: str | Path,
        options: CalibrateOptions, tracking: TrackingOptions, labels: str | Path | None = None,
        plot: str | Path | None = None, html: str | Path | None = None) -> StepResult:
    """Calibrate `onnx` on `calibration`, write the INT8 model to `out` and judge it on `eval_data` (`labels`: a
    .npy of class indices, else a `labels` array beside the eval inputs) inside the step's MLflow run; the plot
    and the HTML report go to `plot` and `html` when given, and to the run. Never raises: `error` verdict."""

    def evaluate(step_run: StepRun | None) -> Verdict:
        from skewgate.calibrate.core import calibrate

        result = calibrate(onnx=onnx, calibration=calibration, eval_data=eval_data, out=out, labels=labels,
                           options=options)
        publish(result, step_run, plot=plot, html=html, options=options)
        return result.verdict.judged_with(options)

    return evaluate_and_record(STEP, evaluate, tracking, settings=options, inputs={
        "onnx": onnx, "calibration": calibration, "eval": eval_data, "labels": labels})


def publish(result: CalibrationResult, step_run: StepRun | None, *, plot: str | Path | None,
            html: str | Path | None, options: CalibrateOptions) -> None:
    """Write the picture and HTML where asked; with tracking, log them (named as `options` says) and the tables."""
    from skewgate.calibrate.int8.report import histogram_plot, report_html
    from skewgate.common import publishing as shared

    shared.publish(step_run, outputs=[(plot, options.plot_name, lambda path: histogram_plot(result, path)),
                                      (html, options.html_name, shared.write_text(lambda: report_html(result)))],
                   tables={"calibration_tensors.json": result.tensors, "calibration_trials.json": result.trials,
                           "calibration_layers.json": result.layers})
