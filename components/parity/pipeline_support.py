"""What the parity component does around the core: write the plot and the HTML, log them and the per-layer
tables to the step's MLflow run."""

from __future__ import annotations

from pathlib import Path

from skewgate.common import publishing as shared
from skewgate.common.mlflow_log import StepRun
from skewgate.common.verdict import Verdict
from skewgate.parity.core import ParityOptions, ParityResult, parity
from skewgate.parity.report import layer_plot, report_html


def run_parity(run: StepRun | None, *, torch_model: str, onnx: str, int8: str, inputs: str, triton_url: str,
               triton_model: str, plot: str, html: str, fp16: bool = False) -> Verdict:
    result = parity(torch_model=torch_model, onnx=onnx, int8=int8 or None, inputs=inputs, fp16=fp16,
                    triton_url=triton_url or None,
                    triton_model=triton_model or None, options=ParityOptions(layerwise=True))
    publish(result, run, plot=plot, html=html)
    return result.verdict


def publish(result: ParityResult, run: StepRun | None, *, plot: str | Path | None, html: str | Path | None,
            plot_name: str = "layer_errors.png", html_name: str = "parity_report.html") -> None:
    """Write the per-layer plot and HTML report where asked; with tracking, log them (under the given names) and
    the per-layer tables to the step run. Shared by the CLI and the component."""
    shared.publish(run, tables={f"layers_{pair}.json": rows for pair, rows in result.layers.items()}, outputs=[
        (plot, plot_name, lambda path: layer_plot(result, path)),
        (html, html_name, shared.write_text(lambda: report_html(result)))])
