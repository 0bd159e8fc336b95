"""Metrics over weighted samples, so that one matrix product gives a metric for every bootstrap resample.

A resample is a row of counts (how often each sample was drawn); the all-ones row is the eval set itself. Both
models are scored with the same rows, so the bootstrap is paired: the interval is on the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import numpy as np

Task = Literal["classification", "regression"]
METRICS: dict[Task, tuple[str, ...]] = {"classification": ("accuracy", "macro_f1"), "regression": ("mae", "rmse")}
HIGHER_IS_BETTER = {"accuracy": True, "macro_f1": True, "mae": False, "rmse": False}
Scorer = Callable[[np.ndarray], dict[str, np.ndarray]]  # (resamples, n) counts → metric → (resamples,)
CHUNK = 128  # resamples per matrix product: bounds memory at CHUNK × n counts


def classification_scorer(logits: np.ndarray, labels: np.ndarray, classes: int) -> Scorer:
    """Accuracy and macro-F1 of the top-1 of `logits` (n, classes). Macro-F1 averages over the classes that
    occur among the labels or the predictions of the (re)sample, as scikit-learn's `f1_score(average="macro")`."""
    predicted = logits.argmax(axis=1)
    correct = (predicted == labels).astype(np.float64)
    eye = np.eye(classes)
    true_hot, pred_hot = eye[labels], eye[predicted]
    hits = true_hot * correct[:, None]

    def score(counts: np.ndarray) -> dict[str, np.ndarray]:
        total = counts.sum(axis=1)
        tp, support, claimed = counts @ hits, counts @ true_hot, counts @ pred_hot
        denominator = support + claimed
        present = denominator > 0
        f1 = np.where(present, 2 * tp / np.where(present, denominator, 1.0), 0.0)
        return {"accuracy": counts @ correct / total, "macro_f1": f1.sum(axis=1) / present.sum(axis=1)}

    return score


def regression_scorer(predictions: np.ndarray, targets: np.ndarray) -> Scorer:
    """MAE and RMSE; a sample with several outputs contributes the mean over them."""
    error = predictions.reshape(len(predictions), -1).astype(np.float64) - targets.reshape(len(targets), -1)
    absolute, squared = np.abs(error).mean(axis=1), (error**2).mean(axis=1)

    def score(counts: np.ndarray) -> dict[str, np.ndarray]:
        total = counts.sum(axis=1)
        return {"mae": counts @ absolute / total, "rmse": np.sqrt(counts @ squared / total)}

    return score


def point(scorer: Scorer, n: int) -> dict[str, float]:
    """The metrics on the eval set itself."""
    return {name: float(values[0]) for name, values in scorer(np.ones((1, n))).items()}


def resample_counts(n: int, *, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """Bootstrap resamples of `n` samples as count rows, `CHUNK` rows at a time (seeded, so reproducible)."""
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, CHUNK):
        rows = min(CHUNK, resamples - start)
        drawn = rng.integers(0, n, size=(rows, n))
        offsets = drawn + np.arange(rows)[:, None] * n  # one bincount for all rows of the chunk
        yield np.bincount(offsets.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float64)


def paired_intervals(candidate: Scorer, champion: Scorer, n: int, *, resamples: int, seed: int,
                     confidence: float) -> dict[str, tuple[float, float]]:
    """Percentile interval of (candidate − champion) for each metric, over the same resamples for both."""
    differences: dict[str, list[np.ndarray]] = {}
    for counts in resample_counts(n, resamples=resamples, seed=seed):
        ours, theirs = candidate(counts), champion(counts)
        for name in ours:
            differences.setdefault(name, []).append(ours[name] - theirs[name])
    tail = 100 * (1 - confidence) / 2
    result = {}
    for name, parts in differences.items():
        low, high = np.percentile(np.concatenate(parts), [tail, 100 - tail])
        result[name] = (float(low), float(high))
    return result
