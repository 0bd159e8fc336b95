"""What the calibrate component does around the core: write the picture and the HTML, log them and the tables
(tensors, trials, per-layer SQNR) to the step's MLflow run."""

from __future__ import annotations

from pathlib import Path

from skewgate.calibrate.core import CalibrateOptions, CalibrationResult, calibrate
from skewgate.calibrate.report import histogram_plot, report_html
from skewgate.common import publishing as shared
from skewgate.common.mlflow_log import StepRun
from skewgate.common.verdict import Verdict


def run_calibrate(run: StepRun | None, *, onnx: str, calibration: str, eval_data: str, out: str, plot: str,
                  html: str, options: CalibrateOptions) -> Verdict:
    result = calibrate(onnx=onnx, calibration=calibration, eval_data=eval_data, out=out, options=options)
    publish(result, run, plot=plot, html=html)
    return result.verdict


def publish(result: CalibrationResult, run: StepRun | None, *, plot: str | Path | None, html: str | Path | None,
            plot_name: str = "calibration_histograms.png", html_name: str = "calibration_report.html") -> None:
    """Write the picture and HTML where asked; with tracking, log them and the tables. CLI and component."""
    shared.publish(run, outputs=[(plot, plot_name, lambda path: histogram_plot(result, path)),
                                 (html, html_name, shared.write_text(lambda: report_html(result)))],
                   tables={"calibration_tensors.json": result.tensors, "calibration_trials.json": result.trials,
                           "calibration_layers.json": result.layers})
