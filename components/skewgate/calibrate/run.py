"""The one entry the CLI and the KFP component call: calibrate (core.py), then write the picture and the HTML where
asked and, with tracking, log them and the tables (tensors, trials, per-layer SQNR) to the step's MLflow run.
`CalibrateOptions` (core.py, re-exported here) is the single source of every default."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from skewgate.calibrate.core import CalibrateOptions, CalibrationResult, calibrate
from skewgate.calibrate.int8.report import histogram_plot, report_html
from skewgate.common import publishing as shared
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

__all__ = ["CalibrateOptions", "publish", "run_calibrate"]
PLOT_NAME, HTML_NAME = "calibration_histograms.png", "calibration_report.html"


def run_calibrate(run: StepRun | None, *, onnx: str | Path, calibration: str | Path, eval_data: str | Path,
                  out: str | Path, labels: str | Path | None = None, plot: str | Path | None = None,
                  html: str | Path | None = None, plot_name: str = PLOT_NAME, html_name: str = HTML_NAME,
                  options: CalibrateOptions | None = None) -> Verdict:
    """Calibrate `onnx`, write the INT8 model to `out`, publish; `plot_name`/`html_name` name the artifacts in
    MLflow (the CLI keeps its files' names; KFP output paths have none)."""
    result = calibrate(onnx=onnx, calibration=calibration, eval_data=eval_data, out=out, labels=labels,
                       options=options or CalibrateOptions())
    publish(result, run, plot=plot, html=html, plot_name=plot_name, html_name=html_name)
    return result.verdict.judged_with(options or CalibrateOptions())


def publish(result: CalibrationResult, run: StepRun | None, *, plot: str | Path | None, html: str | Path | None,
            plot_name: str = PLOT_NAME, html_name: str = HTML_NAME) -> None:
    """Write the picture and HTML where asked; with tracking, log them and the tables."""
    shared.publish(run, outputs=[(plot, plot_name, lambda path: histogram_plot(result, path)),
                                 (html, html_name, shared.write_text(lambda: report_html(result)))],
                   tables={"calibration_tensors.json": result.tensors, "calibration_trials.json": result.trials,
                           "calibration_layers.json": result.layers})
