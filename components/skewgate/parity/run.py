"""The one entry the CLI and the KFP component call: files and options in, a recorded (and signed) verdict out —
judge parity (core.py), then write the per-layer plot and HTML report where asked and, with tracking, log them
and the per-layer tables to the step's MLflow run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.compare import Tolerance
    from skewgate.common.mlflow_log import StepRun
    from skewgate.common.output_tasks import Task
    from skewgate.common.triton.client import Protocol
    from skewgate.parity.core import ParityResult, Served

STEP = "parity"
ARTIFACT_NAMES = ("plot_name", "html_name")  # how the pictures are logged, not how the model was judged


@dataclass(frozen=True, kw_only=True)
class ParityOptions:
    """Every default of `skewgate parity` and `parity_op` lives here (the files are `run`'s arguments), but for
    `parity_op`'s `layerwise`: on in the pipeline, so that promote's evidence names the first diverging layer."""

    layerwise: bool = False
    batch_size: int = 32
    max_samples: int = 256
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)  # per final output; else grounded
    layer_tolerance: Tolerance | None = None  # None: each value's float64-grounded tolerance, floor LAYER_TOLERANCE
    min_layer_sqnr_db: float = 20.0  # INT8 intermediates below this diverge
    min_output_sqnr_db: float = 15.0
    # INT8 vs FP32 as calibrate judges it (common/output_tasks.py): the share of positions kept, per task
    min_top1_agreement: float = 0.99
    max_kl_divergence: float = 0.05
    task: Task = "auto"  # classification|segmentation|embedding|regression, or read from the output's shape
    class_axis: int | None = None  # None: axis 1 of a rank-4 output, else the last
    output_tasks: Mapping[str, str] = field(default_factory=dict)  # output name → "TASK[:AXIS]", over `task`
    min_cosine_similarity: float = 0.99  # embedding: a sample below this cosine to FP32 is harmed
    max_regression_error: float = 0.05  # regression: a value moved by more than this share of its spread is harmed
    triton_protocol: Protocol = "http"
    # what Triton serves: the FP32 model (held to FP32's tolerances and the agreement) or an FP16 / INT8 candidate
    # (the agreement alone, as that candidate is judged)
    triton_serves: Served = "fp32"
    triton_deadline_s: float = 20.0  # per call to Triton, retries of a server that cannot be reached included
    seed: int = 0
    fp16_cuda: bool = False  # run the FP16 comparison on ONNX Runtime's CUDA provider
    # stream mode (internals/stream.py): the one-step model as served, its state pairs IN → OUT, initial state
    stream_onnx: str | Path | None = None
    states: Mapping[str, str] = field(default_factory=dict)
    initial_state: str | Path | None = None  # .npz keyed by state input name; None: zeros
    # the names the plot and the HTML report are logged under in the step run (KFP output paths have none; the
    # CLI's are the files' own: empty)
    plot_name: str = "layer_errors.png"
    html_name: str = "parity_report.html"

    def judged_settings(self) -> dict[str, Any]:
        """What a verdict says it was judged with (`Verdict.judged_with`): every option but the artifact names."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ARTIFACT_NAMES}


def run(*, torch_model: str | Path, onnx: str | Path, inputs: str | Path, options: ParityOptions,
        tracking: TrackingOptions, int8: str | Path | None = None, fp16: str | Path | bool = False,
        fp16_out: str | Path | None = None, triton_url: str | None = None, triton_model: str | None = None,
        plot: str | Path | None = None, html: str | Path | None = None) -> StepResult:
    """Judge `onnx` against `torch_model` on `inputs` (and the `int8` model, an FP16 one — `fp16`: True to
    convert, or its path; `fp16_out`: where the FP16 model with the proposed nodes kept in FP32 goes —, a Triton
    at `triton_url` serving `triton_model`) inside the step's MLflow run; the plot and the HTML report go to
    `plot` and `html` when given, and to the run. Empty strings count as not given (KFP passes "" for an unset
    optional input). Never raises: `error` verdict."""

    def evaluate(step_run: StepRun | None) -> Verdict:
        from skewgate.parity.core import parity

        result = parity(torch_model=torch_model, onnx=onnx, inputs=inputs, int8=int8 or None, fp16=fp16,
                        fp16_out=fp16_out or None, triton_url=triton_url or None, triton_model=triton_model or None,
                        options=options)
        publish(result, step_run, plot=plot or None, html=html or None, options=options)
        return result.verdict.judged_with(options)

    return evaluate_and_record(STEP, evaluate, tracking, settings=options, inputs={
        "torch_model": torch_model, "onnx": onnx, "inputs": inputs, "int8": int8,
        "fp16": None if isinstance(fp16, bool) else fp16, "stream_onnx": options.stream_onnx,
        "initial_state": options.initial_state})


def publish(result: ParityResult, step_run: StepRun | None, *, plot: str | Path | None, html: str | Path | None,
            options: ParityOptions) -> None:
    """Write the per-layer plot and HTML report where asked; with tracking, log them (named as `options` says)
    and the per-layer tables to the step run."""
    from skewgate.common import publishing as shared
    from skewgate.parity.internals.report import layer_plot, report_html

    shared.publish(step_run, tables={f"layers_{pair}.json": rows for pair, rows in result.layers.items()}, outputs=[
        (plot, options.plot_name, lambda path: layer_plot(result, path)),
        (html, options.html_name, shared.write_text(lambda: report_html(result)))])
