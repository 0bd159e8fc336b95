"""Calibration of a classifier's scores on labelled reference data: one isotonic map per class, score → P(class).

This is the calibration of NannyML's CBPE (confidence-based performance estimation): for each class k, an
isotonic regression of "the label is k" on the model's score for k; for more than two classes the calibrated
scores of a sample are normalised to sum to one. Between fitted points the map is linear, beyond them it is flat
(scikit-learn's `IsotonicRegression(out_of_bounds="clip")`, which the tests hold it equal to); the fit is scipy's
pool-adjacent-violators (`scipy.optimize.isotonic_regression`).

A bootstrap resample of the reference is a row of counts used as weights, so that a resample needs no sorting:
the scores' order is found once per class (`Reference`), and each fit is one weighted PAV.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from skewgate.common.errors import InputError


def probabilities(outputs: np.ndarray, *, normalised: bool, source: str) -> np.ndarray:
    """A classifier's output as scores per class (n, classes), float64. `normalised`: the output is a Softmax's or
    a Sigmoid's (the graph says so, not the values: a batch of logits may happen to lie in [0, 1]); otherwise
    logits, put through a softmax (a single column: a sigmoid, as the second of two classes)."""
    values = np.asarray(outputs, dtype=np.float64)
    if values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1):
        column = values.reshape(-1)
        p = column if normalised else 1 / (1 + np.exp(-column))
        return np.stack([1 - p, p], axis=1)
    if values.ndim != 2:
        raise InputError(source, expected="a classifier's output: (samples, classes) scores, or one score per sample",
                         found=f"shape {list(values.shape)} (segmentation and other dense outputs are not supported)")
    if normalised:
        return values
    shifted = np.exp(values - values.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Isotonic:
    """One class's map: `knots` (increasing scores) to `values` (non-decreasing probabilities)."""

    knots: np.ndarray
    values: np.ndarray

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        return np.interp(scores, self.knots, self.values)


@dataclass(frozen=True)
class Calibration:
    """The calibrated probability of every class from a sample's scores. Two classes: one map, for class 1."""

    maps: tuple[Isotonic, ...]
    classes: int

    def apply(self, scores: np.ndarray) -> np.ndarray:
        if self.classes == 2:
            p = self.maps[0](scores[:, 1])
            return np.stack([1 - p, p], axis=1)
        calibrated = np.stack([m(scores[:, k]) for k, m in enumerate(self.maps)], axis=1)
        total = calibrated.sum(axis=1, keepdims=True)
        # every class calibrated to 0 (scores where the reference never saw any class): nothing is known
        return np.where(total > 0, calibrated / np.where(total > 0, total, 1), 1 / self.classes)


class Reference:
    """Labelled reference scores, sorted once per calibrated class, for fitting on the whole set or on resamples."""

    def __init__(self, scores: np.ndarray, labels: np.ndarray) -> None:
        self.scores, self.labels = scores, labels
        self.classes = scores.shape[1]
        columns = [1] if self.classes == 2 else range(self.classes)
        self._sorted = []
        for k in columns:
            knots, inverse = np.unique(scores[:, k], return_inverse=True)
            self._sorted.append((knots, inverse, (labels == k).astype(np.float64)))

    @property
    def samples(self) -> int:
        return len(self.labels)

    def fit(self, weights: np.ndarray | None = None) -> Calibration:
        """The calibration fit with each sample counted `weights[i]` times (default once)."""
        from scipy.optimize import isotonic_regression

        w = np.ones(self.samples) if weights is None else weights
        maps = []
        for knots, inverse, hits in self._sorted:
            counts = np.bincount(inverse, weights=w, minlength=len(knots))
            seen = counts > 0
            rate = np.bincount(inverse, weights=w * hits, minlength=len(knots))[seen] / counts[seen]
            fitted = isotonic_regression(rate, weights=counts[seen], increasing=True).x
            maps.append(_compact(Isotonic(knots[seen], np.clip(fitted, 0.0, 1.0))))
        return Calibration(maps=tuple(maps), classes=self.classes)

    def resampled(self, *, resamples: int, seed: int) -> list[Calibration]:
        """`resamples` bootstrap fits (seeded): the calibration's own uncertainty."""
        rng = np.random.default_rng(seed)
        n = self.samples
        return [self.fit(np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64))
                for _ in range(resamples)]

    def out_of_fold(self, *, folds: int, seed: int) -> np.ndarray:
        """Each sample's calibrated probabilities from a fit on the other folds: how well the method calibrates
        data it was not fit on (an in-sample isotonic fit is calibrated by construction)."""
        fold = np.random.default_rng(seed).permutation(self.samples) % folds
        result = np.empty_like(self.scores)
        for f in range(folds):
            result[fold == f] = self.fit((fold != f).astype(np.float64)).apply(self.scores[fold == f])
        return result


def _compact(isotonic: Isotonic) -> Isotonic:
    """The same map with only the ends of each plateau kept: between two knots of one value `np.interp` is flat
    whatever lies between them, so nothing it returns changes, and a fit of n points keeps far fewer (what a
    profile stores, 1 + resamples calibrations of them)."""
    v = isotonic.values
    if len(v) < 3:
        return isotonic
    keep = np.ones(len(v), dtype=bool)
    keep[1:-1] = (v[1:-1] != v[:-2]) | (v[1:-1] != v[2:])
    return Isotonic(isotonic.knots[keep], v[keep])


def check_labels(labels: np.ndarray, classes: int, *, source: str, field: str | None) -> np.ndarray:
    """Integer class labels, one per sample, each a class of the output; float targets (a regressor's) are refused:
    their estimation (direct loss estimation) is not built."""
    if labels.ndim != 1:
        raise InputError(source, field=field, expected="one class label per sample, shape (n,)",
                         found=f"shape {list(labels.shape)}")
    if labels.dtype.kind not in "iub":
        raise InputError(source, field=field, expected="integer class labels (estimate supports classifiers; "
                         "estimating a regressor's MAE/RMSE without labels is not supported)",
                         found=f"dtype {labels.dtype}")
    values = labels.astype(np.int64)
    if len(values) and (values.min() < 0 or values.max() >= classes):
        raise InputError(source, field=field, expected=f"class indices in [0, {classes}) (the output's classes)",
                         found=f"values in [{values.min()}, {values.max()}]")
    return values


def unseen_classes(labels: Sequence[int] | np.ndarray, classes: int) -> list[int]:
    """The classes with no reference sample: their calibrated probability is 0 everywhere, so the estimate can
    never credit a prediction of them (named in the verdict)."""
    return sorted(set(range(classes)) - set(np.unique(labels).tolist()))
