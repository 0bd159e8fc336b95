"""The estimate and its interval, tallied over the current data batch by batch (memory flat in the rows).

The estimate is CBPE's: the expected confusion matrix under the calibration fit on the whole reference (for a
sample predicted k, calibrated P(label = j) is added to cell [j, k]); a metric of it is the estimated metric, and
for accuracy it is the mean calibrated probability of the predicted class. The interval is a predictive one for
the metric the labels would realise: per bootstrap calibration (the calibration's own uncertainty) one label is
drawn per sample from its calibrated probabilities (the sample's own chance), and the metric of the drawn
confusion matrix is one draw; the interval is their percentiles. It assumes P(label | scores) is the reference's
(no concept shift).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

import numpy as np

from skewgate.estimate.method.calibration import Calibration

Metric = Literal["accuracy", "macro_f1"]
METRICS: tuple[Metric, ...] = ("accuracy", "macro_f1")
ECE_BINS = 15


def metric_of(confusion: np.ndarray, metric: Metric) -> np.ndarray:
    """`metric` of confusion matrices [..., true, predicted]. Macro-F1 averages over the classes that occur among
    the labels or the predictions, as compare's and scikit-learn's `f1_score(average="macro")`."""
    tp = np.diagonal(confusion, axis1=-2, axis2=-1)
    total = confusion.sum(axis=(-2, -1))
    if metric == "accuracy":
        return np.asarray(tp.sum(axis=-1) / total)
    denominator = confusion.sum(axis=-1) + confusion.sum(axis=-2)
    present = denominator > 0
    f1 = np.where(present, 2 * tp / np.where(present, denominator, 1), 0.0)
    return np.asarray(f1.sum(axis=-1) / present.sum(axis=-1))


def confusion_of(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """The realised confusion matrix [true, predicted]."""
    return np.bincount(labels * classes + predicted, minlength=classes * classes).reshape(classes, classes)


class Tally:
    """Confusion counts over batches of current scores: expected under `calibration`, and drawn under each of
    `resampled`. Each resample draws from its own seeded stream in sample order, one stream per file of a
    snapshot (keyed by the file's name), so the interval depends on the data and the seed, not on how the data
    was cut into batches or the files into shards. Tallies of disjoint data `merge` into the tally of both."""

    COUNTS = ("expected", "drawn", "confidence_counts")  # with `samples`: what a shard hands the merge

    def __init__(self, calibration: Calibration, resampled: Sequence[Calibration], *, seed: int) -> None:
        self.calibration, self.resampled, self.seed = calibration, tuple(resampled), seed
        classes = calibration.classes
        self.expected = np.zeros((classes, classes))
        self.drawn = np.zeros((len(self.resampled), classes, classes), dtype=np.int64)
        self.confidence_counts = np.zeros(ECE_BINS, dtype=np.int64)  # calibrated top-1 confidence, per bin
        self.samples = 0
        self._origin = ""
        self._streams = self._streams_of("")
        self._eye = np.eye(classes)

    def _streams_of(self, origin: str) -> list[np.random.Generator]:
        # a single file (origin "") keeps the streams [seed, b]; a snapshot's file adds its name's hash
        key = [int.from_bytes(hashlib.sha256(origin.encode()).digest()[:8], "little")] if origin else []
        return [np.random.default_rng([self.seed, b, *key]) for b in range(len(self.resampled))]

    def merge(self, other: Tally) -> None:
        """Add `other`'s counts (a tally of other samples under the same calibrations)."""
        for name in self.COUNTS:
            getattr(self, name)[...] += getattr(other, name)
        self.samples += other.samples

    def add(self, scores: np.ndarray, *, origin: str = "") -> None:
        """`origin`: the file the scores come from (empty: the data is one file)."""
        if origin != self._origin:
            self._origin, self._streams = origin, self._streams_of(origin)
        classes = self.calibration.classes
        predicted = scores.argmax(axis=1)
        calibrated = self.calibration.apply(scores)
        self.expected += calibrated.T @ self._eye[predicted]
        self.confidence_counts += np.bincount(_bin(calibrated.max(axis=1)), minlength=ECE_BINS)
        for b, (calibration, stream) in enumerate(zip(self.resampled, self._streams, strict=True)):
            cumulative = calibration.apply(scores).cumsum(axis=1)
            drawn = (cumulative < stream.random(len(scores))[:, None]).sum(axis=1).clip(max=classes - 1)
            self.drawn[b] += confusion_of(drawn, predicted, classes)
        self.samples += len(scores)

    def estimate(self, metric: Metric) -> float:
        return float(metric_of(self.expected, metric))

    def interval(self, metric: Metric, *, confidence: float) -> tuple[float, float]:
        tail = 100 * (1 - confidence) / 2
        low, high = np.percentile(metric_of(self.drawn, metric), [tail, 100 - tail])
        return float(low), float(high)


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray, *, bins: int = ECE_BINS) -> float:
    """ECE of the top-1: the mean over equal-width confidence bins of |accuracy − mean confidence|, weighted by
    the bin's share of samples (Guo et al. 2017): read off the reliability bins."""
    rows = reliability(probabilities, labels, bins=bins)
    return sum(abs(r["accuracy"] - r["confidence"]) * r["samples"] for r in rows) / len(labels)


def reliability(probabilities: np.ndarray, labels: np.ndarray, *, bins: int = ECE_BINS) -> list[dict[str, float]]:
    """Per non-empty confidence bin: its range, sample count, mean confidence and accuracy (the reliability plot)."""
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == labels
    which = _bin(confidence, bins)
    rows = []
    for b in np.unique(which):
        inside = which == b
        rows.append({"low": b / bins, "high": (b + 1) / bins, "samples": int(inside.sum()),
                     "confidence": float(confidence[inside].mean()), "accuracy": float(correct[inside].mean())})
    return rows


def _bin(confidence: np.ndarray, bins: int = ECE_BINS) -> np.ndarray:
    return np.minimum((confidence * bins).astype(np.int64), bins - 1)
