"""Metrics over weighted samples, so that one matrix product gives a metric for every bootstrap resample.

A resample is a row of counts (how often each sample was drawn); the all-ones row is the eval set itself. Both
models are scored with the same rows, so the bootstrap is paired: the interval is on the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import numpy as np

Task = Literal["classification", "segmentation", "embedding", "regression"]
METRICS: dict[Task, tuple[str, ...]] = {"classification": ("accuracy", "macro_f1"),
                                        "segmentation": ("pixel_accuracy", "miou"),
                                        "embedding": ("nn_accuracy", "recall_at_k"), "regression": ("mae", "rmse")}
HIGHER_IS_BETTER = {"accuracy": True, "macro_f1": True, "pixel_accuracy": True, "miou": True, "nn_accuracy": True,
                    "recall_at_k": True, "mae": False, "rmse": False}
Scorer = Callable[[np.ndarray], dict[str, np.ndarray]]  # (resamples, n) counts → metric → (resamples,)
CHUNK = 128  # resamples per matrix product: bounds memory at CHUNK × n counts
RECALL_K = 5  # recall@k of the embedding retrieval
BLOCK = 1024  # query rows per similarity block: bounds memory at BLOCK × n


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


def segmentation_scorer(scores: np.ndarray, labels: np.ndarray, classes: int) -> Scorer:
    """Pixel accuracy and mIoU of the per-pixel argmax of `scores` (n, classes, …) against `labels` (n, …). A
    sample contributes its pixels' counts (correct; per class: intersection, predicted, true), which add up over
    a resample, so mIoU is the set's (intersection over union per class, over the classes present in the labels
    or the predictions of the resample), never a mean of per-image IoUs."""
    predicted = scores.argmax(axis=1).reshape(len(scores), -1)
    truth = labels.reshape(len(labels), -1)
    pixels = np.full(len(truth), truth.shape[1], dtype=np.float64)
    hit = predicted == truth
    correct = hit.sum(axis=1).astype(np.float64)
    # per sample and class (n, classes): one bincount per image, whatever the number of classes
    inter = np.stack([np.bincount(t[h], minlength=classes) for t, h in zip(truth, hit, strict=True)]).astype(float)
    claimed = np.stack([np.bincount(row, minlength=classes) for row in predicted]).astype(np.float64)
    support = np.stack([np.bincount(row, minlength=classes) for row in truth]).astype(np.float64)

    def score(counts: np.ndarray) -> dict[str, np.ndarray]:
        i = counts @ inter
        union = counts @ claimed + counts @ support - i
        present = union > 0
        iou = np.where(present, i / np.where(present, union, 1.0), 0.0)
        return {"pixel_accuracy": counts @ correct / (counts @ pixels), "miou": iou.sum(axis=1) / present.sum(axis=1)}

    return score


def nearest_neighbours(embeddings: np.ndarray, k: int) -> np.ndarray:
    """(n, k) indices of each sample's `k` nearest other samples by cosine similarity, nearest first (itself
    excluded: a query is never its own answer). Blocked: `BLOCK` × n similarities at a time."""
    flat = embeddings.reshape(len(embeddings), -1).astype(np.float32)
    unit = flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)
    found = np.empty((len(unit), k), dtype=np.int64)
    for start in range(0, len(unit), BLOCK):
        similarity = unit[start:start + BLOCK] @ unit.T
        rows = np.arange(len(similarity))
        similarity[rows, rows + start] = -np.inf
        top = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(similarity, top, axis=1), axis=1, kind="stable")
        found[start:start + BLOCK] = np.take_along_axis(top, order, axis=1)
    return found


def retrieval_neighbours(embeddings: np.ndarray) -> np.ndarray:
    """Each sample's `RECALL_K` nearest others in the set (fewer when the set is smaller), nearest first: what
    `embedding_scorer` judges, and churn compares the first of."""
    return nearest_neighbours(embeddings, min(RECALL_K, len(embeddings) - 1))


def embedding_scorer(embeddings: np.ndarray, labels: np.ndarray, *, neighbours: np.ndarray | None = None) -> Scorer:
    """Retrieval over the eval set itself, each sample a query against all others: `nn_accuracy`, the share
    whose nearest neighbour has its label, and `recall_at_k`, the share with its label among its `RECALL_K`
    nearest. The neighbours are the whole set's (`retrieval_neighbours`, or given when already found); a resample
    weighs the queries."""
    neighbours = retrieval_neighbours(embeddings) if neighbours is None else neighbours
    same = labels[neighbours] == labels[:, None]
    first, any_of = same[:, 0].astype(np.float64), same.any(axis=1).astype(np.float64)

    def score(counts: np.ndarray) -> dict[str, np.ndarray]:
        total = counts.sum(axis=1)
        return {"nn_accuracy": counts @ first / total, "recall_at_k": counts @ any_of / total}

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
