"""What the calibrate component does around the core: write the picture and the HTML, log them and the tables
(tensors, trials, per-layer SQNR) to the step's MLflow run."""

from __future__ import annotations

from pathlib import Path

from skewgate.calibrate.core import CalibrateOptions, CalibrationResult, calibrate
from skewgate.calibrate.report import histogram_plot, report_html
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
    if plot:
        histogram_plot(result, plot)
    if html:
        Path(html).parent.mkdir(parents=True, exist_ok=True)
        Path(html).write_text(report_html(result), encoding="utf-8")
    if run is not None:
        run.log_table("calibration_tensors.json", result.tensors)
        run.log_table("calibration_trials.json", result.trials)
        run.log_table("calibration_layers.json", result.layers)
        if plot:
            run.log_artifact_as(plot, plot_name)
        if html:
            run.log_artifact_as(html, html_name)
