"""The one entry the CLI and the KFP component call: estimate inside the step's MLflow run, then publish the
estimate table and the reliability plot (the calibration on the reference, out of fold, beside the model's own),
and the estimate profile promote records with the model version."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common import mlflow_conventions as conv
from skewgate.common.io import sha256_file
from skewgate.common.publishing import publish, pyplot
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.verdict import Verdict
from skewgate.estimate.core import STEP, EstimateOptions, estimate

PROFILE_NAME = "estimate.profile"

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun


def run(*, onnx: str | Path, current: str | Path, options: EstimateOptions, tracking: TrackingOptions,
        reference: str | Path | None = None, labels: str | Path | None = None, profile: str | Path | None = None,
        profile_out: str | Path | None = None, current_labels: str | Path | None = None,
        plot: str | Path | None = None) -> StepResult:
    """Estimate `options.metric` of `onnx` on `current` from a labelled `reference` or an estimate `profile`
    inside the step's MLflow run, published (`estimate_in_run`). Never raises: `error` verdict."""
    return evaluate_and_record(
        STEP, lambda step_run: estimate_in_run(
            step_run, onnx=onnx, current=current, options=options, reference=reference, labels=labels,
            profile=profile, profile_out=profile_out, current_labels=current_labels, plot=plot),
        tracking, settings=options, inputs={"onnx": onnx, "reference": reference, "current": current,
                                            "labels": labels, "profile": profile, "current_labels": current_labels})


def estimate_in_run(step_run: StepRun | None, *, onnx: str | Path, current: str | Path, options: EstimateOptions,
                    reference: str | Path | None = None, labels: str | Path | None = None,
                    profile: str | Path | None = None, profile_out: str | Path | None = None,
                    current_labels: str | Path | None = None, plot: str | Path | None = None,
                    partials: Sequence[str | Path] = ()) -> Verdict:
    """The estimate (of the shards' `partials`, when given), published: its tables and the reliability plot to
    the step run, the plot to `plot` when given. With `profile_out`, the fit is saved there and, with tracking,
    logged to the step run, whose URI and digest the verdict asks promote to tag on the model version
    (`registry_tags`), as drift's profile is."""
    verdict = estimate(onnx=onnx, reference=reference, current=current, labels=labels, profile=profile,
                       profile_out=profile_out, current_labels=current_labels, options=options, partials=partials)
    publish(step_run, tables={"estimate.json": list(verdict.details["table"]),
                              "reliability.json": list(verdict.details["reliability"])},
            outputs=[(plot, "reliability.png", lambda path: reliability_plot(verdict, path))])
    if profile_out is None or step_run is None:
        return verdict
    uri = step_run.log_artifact_as(profile_out, PROFILE_NAME, "profile") + f"/{PROFILE_NAME}"
    return dataclasses.replace(verdict, registry_tags={conv.ESTIMATE_PROFILE_URI_TAG: uri,
                                                       conv.ESTIMATE_PROFILE_SHA_TAG: sha256_file(profile_out)})


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
        figure.savefig(path, dpi=110, format="png")  # a KFP output path has no suffix to say so
    finally:
        plt.close(figure)
