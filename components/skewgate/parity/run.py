"""The one entry the CLI and the KFP component call: judge parity, then write the per-layer plot and HTML report
and, with tracking, log them and the per-layer tables to the step's MLflow run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from skewgate.common import publishing as shared
from skewgate.common.verdict import Verdict
from skewgate.parity.core import ParityOptions, ParityResult, parity
from skewgate.parity.internals.report import layer_plot, report_html

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun


def run_parity(run: StepRun | None, *, torch_model: str | Path, onnx: str | Path, inputs: str | Path,
               int8: str | Path | None = None, fp16: str | Path | bool = False, fp16_out: str | Path | None = None,
               triton_url: str | None = None, triton_model: str | None = None,
               plot: str | Path | None = None, html: str | Path | None = None,
               plot_name: str = "layer_errors.png", html_name: str = "parity_report.html",
               options: ParityOptions | None = None) -> Verdict:
    """Empty strings count as not given (KFP passes "" for an unset optional input)."""
    result = parity(torch_model=torch_model, onnx=onnx, inputs=inputs, int8=int8 or None, fp16=fp16,
                    fp16_out=fp16_out or None, triton_url=triton_url or None, triton_model=triton_model or None,
                    options=options or ParityOptions())
    publish(result, run, plot=plot or None, html=html or None, plot_name=plot_name, html_name=html_name)
    return result.verdict.judged_with(options or ParityOptions())


def publish(result: ParityResult, run: StepRun | None, *, plot: str | Path | None, html: str | Path | None,
            plot_name: str = "layer_errors.png", html_name: str = "parity_report.html") -> None:
    """Write the per-layer plot and HTML report where asked; with tracking, log them (under the given names) and
    the per-layer tables to the step run."""
    shared.publish(run, tables={f"layers_{pair}.json": rows for pair, rows in result.layers.items()}, outputs=[
        (plot, plot_name, lambda path: layer_plot(result, path)),
        (html, html_name, shared.write_text(lambda: report_html(result)))])
