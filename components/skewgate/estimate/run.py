"""The one entry the CLI and the KFP component call: estimate inside the step's MLflow run, then publish the
estimate table and the reliability plot (the calibration on the reference, out of fold, beside the model's own)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.publishing import publish, pyplot
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict
from skewgate.estimate.core import STEP, EstimateOptions, estimate

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun


def run(*, onnx: str | Path, reference: str | Path, current: str | Path, options: EstimateOptions,
        tracking: TrackingOptions, labels: str | Path | None = None, plot: str | Path | None = None) -> StepResult:
    """Estimate `options.metric` of `onnx` on `current` (never raises: `error` verdict); the reliability plot goes
    to MLflow, and to `plot` when given."""

    def evaluate(step_run: StepRun | None) -> Verdict:
        verdict = estimate(onnx=onnx, reference=reference, current=current, labels=labels,
                           options=options).judged_with(options)
        publish(step_run, tables={"estimate.json": list(verdict.details["table"]),
                                  "reliability.json": list(verdict.details["reliability"])},
                outputs=[(plot, "reliability.png", lambda path: reliability_plot(verdict, path))])
        return verdict

    return evaluate_and_record(STEP, evaluate, tracking, settings=options,
                               inputs={"onnx": onnx, "reference": reference, "current": current, "labels": labels})


def reliability_plot(verdict: Verdict, path: Path) -> None:
    """Accuracy against confidence per bin on the reference (out of fold): on the diagonal, the calibration the
    estimate rests on holds; the bars are each bin's share of samples. The title says the estimate."""
    plt = pyplot()
    details: dict[str, Any] = dict(verdict.details)
    rows = details["reliability"]
    figure, axis = plt.subplots(figsize=(5, 4.5))
    try:
        mid = [(r["low"] + r["high"]) / 2 for r in rows]
        total = sum(r["samples"] for r in rows) or 1
        axis.bar(mid, [r["samples"] / total for r in rows], width=[r["high"] - r["low"] for r in rows],
                 color="#cccccc", label="share of reference samples")
        current = details["current_confidence"]
        if sum(current):  # where tonight's samples sit on the same bins: the estimate is their weighted accuracy
            edges = [i / len(current) for i in range(len(current) + 1)]
            axis.stairs([c / sum(current) for c in current], edges, color="#d62728",
                        label="share of current samples (calibrated)")
        axis.plot([0, 1], [0, 1], color="#888888", linestyle="--", linewidth=1, label="perfect calibration")
        axis.plot([r["confidence"] for r in rows], [r["accuracy"] for r in rows], marker="o",
                  label=f"calibrated, out of fold (ECE {details['reference_ece']:.3f})")
        axis.set_xlabel("top-1 confidence")
        axis.set_ylabel("accuracy")
        axis.set_xlim(0, 1)
        axis.set_ylim(0, 1.02)
        estimated, interval = details.get("estimated_accuracy"), details.get("estimated_interval")
        title = f"estimate: {verdict.status.upper()} — reference accuracy {details['reference_accuracy']:.3f}"
        if estimated is not None and interval:
            title += f"\nestimated {estimated:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"
        axis.set_title(title, fontsize=9)
        axis.legend(fontsize=7, loc="upper left")
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)
