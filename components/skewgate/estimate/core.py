"""Label-free performance estimation: a pure function over paths that returns a `Verdict`.

The model runs in ONNX Runtime on a labelled reference (its eval set) and on unlabelled current data (serving).
Its scores are calibrated on the reference (`method.calibration`), and the metric the current data's labels would
realise is estimated with an interval (`method.confusion`). The check `performance.estimated_drop` fails when the
whole interval lies more than `max_drop` below the reference's realised metric, warns when the interval straddles
that line, and passes when the interval stays above it. The estimate assumes no concept shift; the verdict says so,
and warns when current scores lie outside what the reference calibrated (there the calibration extrapolates).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import load_labels, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.runtime import run_by_name, session
from skewgate.common.verdict import OMIT_IF_NONE, Check, Subject, Verdict
from skewgate.estimate.data.batches import Inputs
from skewgate.estimate.method.calibration import Reference, check_labels, probabilities, unseen_classes
from skewgate.estimate.method.confusion import (
    METRICS,
    Metric,
    Tally,
    confusion_of,
    expected_calibration_error,
    metric_of,
    reliability,
)

STEP = "estimate"
NORMALISING_OPS = ("Softmax", "Sigmoid")  # an output one of these produces holds probabilities, not logits
METHOD = ("CBPE (confidence-based performance estimation): per-class isotonic calibration of the scores on the "
          "labelled reference, the expected confusion matrix on the current data")
METHOD_REFERENCE = "NannyML, CBPE: https://nannyml.readthedocs.io/en/stable/how_it_works/performance_estimation.html"
ASSUMPTION = ("no concept shift: P(label | scores) on the current data is the reference's; a change in what the "
              "labels mean, or a shift into scores the reference never produced, is not seen by the estimate")


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    """Every default of `skewgate estimate` and `estimate_op` lives here."""

    metric: Metric = "accuracy"  # the metric judged (both are estimated and reported)
    max_drop: float = 0.02  # the largest fall below the reference's realised metric the interval may show
    confidence: float = 0.95  # of the interval
    resamples: int = 200  # bootstrap calibrations behind the interval
    seed: int = 0
    folds: int = 5  # of the out-of-fold reliability (ECE) on the reference
    max_extrapolated: float = 0.05  # share of current samples scored outside the reference's range (a warning)
    output: str | None = None  # graph output holding the scores (default: the first)
    labels_key: str = "labels"  # the reference's array (or column) of labels, unless a labels .npy is given
    features: tuple[str, ...] = ()  # Parquet/CSV columns that are the model's input, in order
    batch_rows: int = 65_536  # samples per ONNX Runtime run and per table batch (memory, not judging)

    def check(self) -> None:
        """`InputError` for a value no estimate can be made with."""
        if self.metric not in get_args(Metric):
            raise InputError("metric", expected=f"one of {list(get_args(Metric))}", found=repr(self.metric))
        if not 0.5 <= self.confidence < 1:
            raise InputError("confidence", expected="a level in [0.5, 1)", found=str(self.confidence))
        if self.resamples < 100:
            raise InputError("resamples", expected="at least 100 bootstrap calibrations", found=str(self.resamples))
        if not 0 <= self.max_drop < 1 or not 0 <= self.max_extrapolated <= 1:
            raise InputError("max_drop" if not 0 <= self.max_drop < 1 else "max_extrapolated",
                             expected="a share in [0, 1)", found=f"{self.max_drop}, {self.max_extrapolated}")
        if self.folds < 2 or self.batch_rows < 1:
            raise InputError("folds" if self.folds < 2 else "batch_rows", expected="folds ≥ 2 and batch_rows ≥ 1",
                             found=f"folds {self.folds}, batch_rows {self.batch_rows}")


@dataclass(frozen=True)
class EstimateDetails:
    """estimate's `details`: the judged metric's figures first, then both metrics per row of `table`, then the
    evidence about the estimate itself (its calibration on the reference, where it extrapolates)."""

    metric: Metric
    reference_samples: int
    current_samples: int
    reference_accuracy: float
    estimated_accuracy: float | None  # None: no current sample had finite scores (the verdict fails)
    estimated_interval: list[float] | None
    confidence: float
    table: list[dict[str, Any]]
    reference_ece: float  # of the calibrated probabilities, out of fold
    uncalibrated_ece: float  # of the model's own scores
    reference_out_of_fold_accuracy: float  # the method's estimate on the reference itself, out of fold
    extrapolated_share: float
    reliability: list[dict[str, float]]
    current_confidence: list[int]  # current samples per bin of calibrated top-1 confidence (the reliability bins)
    method: str = METHOD
    method_reference: str = METHOD_REFERENCE
    assumes: str = ASSUMPTION
    unseen_classes: list[int] | None = field(default=None, metadata=OMIT_IF_NONE)


def estimate(*, onnx: str | Path, reference: str | Path, current: str | Path, labels: str | Path | None,
             options: EstimateOptions) -> Verdict:
    """Estimate `options.metric` of `onnx` on `current` from its calibration on `reference` (labels from `labels`,
    or the reference's `options.labels_key` array or column) and judge the drop."""
    options.check()
    onnx, reference, current = Path(onnx), Path(reference), Path(current)
    model = load_onnx(onnx)
    specs = onnx_input_specs(model)
    outputs = [o.name for o in model.graph.output]
    output = options.output or outputs[0]
    if output not in outputs:
        raise InputError(onnx, field="output", expected=f"one of the outputs {outputs}", found=repr(output))
    normalised = any(output in n.output for n in model.graph.node if n.op_type in NORMALISING_OPS)
    runner = session(model)

    def scores(inputs: Inputs) -> Iterator[np.ndarray]:
        for feeds in inputs.batches():
            yield probabilities(run_by_name(runner, feeds)[output], normalised=normalised,
                                source=f"{onnx} output `{output}`")

    reference_inputs = Inputs(reference, specs, options.features, options.batch_rows)
    reference_scores = np.concatenate(list(scores(reference_inputs)))
    if not np.isfinite(reference_scores).all():
        raise InputError(reference, expected="finite model scores on every reference sample (the calibration is "
                         "fit on them)", found=f"{int((~np.isfinite(reference_scores)).any(axis=1).sum())} samples "
                                               "with NaN/Inf scores")
    truth, labels_sha = _labels(labels, reference_inputs, options.labels_key, reference_scores)
    fitted = Reference(reference_scores, truth)
    tally = Tally(fitted.fit(), fitted.resampled(resamples=options.resamples, seed=options.seed), seed=options.seed)
    low, high = reference_scores.min(axis=0), reference_scores.max(axis=0)
    non_finite = extrapolated = 0
    for batch in scores(Inputs(current, specs, options.features, options.batch_rows)):
        finite = np.isfinite(batch).all(axis=1)
        non_finite += int((~finite).sum())
        batch = batch[finite]
        extrapolated += int(_outside(batch, low, high).sum())
        tally.add(batch)
    if tally.samples + non_finite == 0:
        raise InputError(current, expected="at least one current sample", found="0 samples")

    realised = confusion_of(truth, reference_scores.argmax(axis=1), fitted.classes)
    table: list[dict[str, Any]] = [_row(m, float(metric_of(realised, m)), tally, options.confidence)
                                   for m in METRICS]
    out_of_fold = fitted.out_of_fold(folds=options.folds, seed=options.seed)
    share = extrapolated / tally.samples if tally.samples else 0.0
    judged = next(row for row in table if row["metric"] == options.metric)
    checks = [_finite(non_finite, tally.samples + non_finite)]
    if tally.samples:
        checks += [_drop(judged, options), _extrapolation(share, options.max_extrapolated)]
    accuracy = table[0]
    unseen = unseen_classes(truth, fitted.classes)
    details = EstimateDetails(
        metric=options.metric, reference_samples=fitted.samples, current_samples=tally.samples + non_finite,
        reference_accuracy=accuracy["reference"], estimated_accuracy=accuracy.get("estimated"),
        estimated_interval=[accuracy["low"], accuracy["high"]] if tally.samples else None,
        confidence=options.confidence, table=table,
        reference_ece=expected_calibration_error(out_of_fold, truth),
        uncalibrated_ece=expected_calibration_error(reference_scores, truth),
        reference_out_of_fold_accuracy=float(metric_of((out_of_fold.T @ np.eye(fitted.classes)[
            reference_scores.argmax(axis=1)]), "accuracy")),
        extrapolated_share=share, reliability=reliability(out_of_fold, truth),
        current_confidence=tally.confidence_counts.tolist(), unseen_classes=unseen or None)
    data = {"reference": sha256_file(reference), "current": sha256_file(current),
            **({"labels": labels_sha} if labels_sha else {})}
    return Verdict.from_checks(STEP, checks, subject=Subject(artifact=str(onnx), sha256=sha256_file(onnx), data=data),
                               details=details)


def _labels(labels: str | Path | None, reference: Inputs, key: str, scores: np.ndarray) -> tuple[np.ndarray, str]:
    """The reference's labels, checked against its samples and the output's classes; their file's SHA-256 when
    they came from a file of their own."""
    if labels is None:
        values, source, field_name, sha = reference.column(key), str(reference.path), key, ""
    else:
        path = Path(labels)
        values = load_labels(path)
        source, field_name, sha = str(path), None, sha256_file(path)
    truth = check_labels(values, scores.shape[1], source=source, field=field_name)
    if len(truth) != len(scores):
        raise InputError(source, field=field_name, expected=f"one label per reference sample: {len(scores)}",
                         found=f"{len(truth)} labels")
    return truth, sha


def _outside(scores: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Samples whose predicted class's score lies outside the reference's range of that class's score."""
    predicted = scores.argmax(axis=1)
    mine = scores[np.arange(len(scores)), predicted]
    return (mine < low[predicted]) | (mine > high[predicted])


def _row(metric: Metric, reference: float, tally: Tally, confidence: float) -> dict[str, Any]:
    if not tally.samples:
        return {"metric": metric, "reference": reference}
    low, high = tally.interval(metric, confidence=confidence)
    return {"metric": metric, "reference": reference, "estimated": tally.estimate(metric), "low": low, "high": high,
            "drop": reference - tally.estimate(metric)}


def _finite(bad: int, total: int) -> Check:
    return Check("current.scores_finite", passed=bad == 0, value=bad, limit=0,
                 detail=f"{bad} of {total} current samples have NaN/Inf scores (not estimable)" if bad
                 else f"all {total} current samples have finite scores")


def _drop(row: dict[str, Any], options: EstimateOptions) -> Check:
    """Fails when even the interval's top lies more than `max_drop` below the reference; warns when only its
    bottom does. The value is the smallest drop the interval admits (what failing needs to exceed)."""
    metric, reference, low, high = row["metric"], row["reference"], row["low"], row["high"]
    line = reference - options.max_drop
    smallest, largest = reference - high, reference - low
    text = (f"estimated {metric} {row['estimated']:.4f}, {options.confidence:.0%} interval [{low:.4f}, {high:.4f}], "
            f"reference {reference:.4f}: ")
    if smallest > options.max_drop:
        return Check("performance.estimated_drop", passed=False, value=smallest, limit=options.max_drop,
                     detail=text + f"the whole interval lies more than {options.max_drop:.4g} below the reference")
    if largest > options.max_drop:
        return Check("performance.estimated_drop", passed=False, value=smallest, limit=options.max_drop,
                     severity="warn", detail=text + f"the interval straddles {line:.4f} (a drop of "
                                                    f"{options.max_drop:.4g}): more current data would decide")
    return Check("performance.estimated_drop", passed=True, value=smallest, limit=options.max_drop,
                 detail=text + f"the interval stays within {options.max_drop:.4g} of the reference")


def _extrapolation(share: float, limit: float) -> Check:
    return Check("calibration.extrapolated", passed=share <= limit, value=share, limit=limit, severity="warn",
                 detail=f"{share:.2%} of current samples have a predicted-class score outside the reference's range "
                        f"(the calibration is flat there, the estimate less reliable; at most {limit:.2%})")
