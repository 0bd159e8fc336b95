"""The weighted metrics equal scikit-learn's on the eval set itself; the paired bootstrap is seeded and covers
the observed difference."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, jaccard_score, mean_absolute_error, mean_squared_error

from skewgate.compare.scoring.metrics import (
    RECALL_K,
    classification_scorer,
    embedding_scorer,
    nearest_neighbours,
    paired_intervals,
    point,
    regression_scorer,
    resample_counts,
    segmentation_scorer,
)


@pytest.mark.parametrize("seed", [0, 7])
def test_classification_metrics_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, 300)
    logits = rng.normal(size=(300, 6)) + 2.0 * np.eye(6)[labels]
    logits[:5, 5] = 99.0  # class 5 predicted for a few samples: macro-F1 must count classes claimed but absent
    labels[labels == 5] = 4
    values = point(classification_scorer(logits, labels, 6), len(labels))
    predicted = logits.argmax(1)
    assert values["accuracy"] == pytest.approx(accuracy_score(labels, predicted))
    assert values["macro_f1"] == pytest.approx(f1_score(labels, predicted, average="macro"))


@pytest.mark.parametrize("seed", [0, 7])
def test_segmentation_metrics_are_the_sets_pixel_accuracy_and_miou(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, (30, 6, 5))
    scores = rng.normal(size=(30, 5, 6, 5)) + 1.5 * np.moveaxis(np.eye(5)[labels], -1, 1)
    scores[:2, 4] = 99.0  # class 4 claimed on two images, never labelled: it counts (IoU 0), as sklearn's
    values = point(segmentation_scorer(scores, labels, 5), len(labels))
    truth, predicted = labels.ravel(), scores.argmax(1).ravel()
    assert values["pixel_accuracy"] == pytest.approx(accuracy_score(truth, predicted))
    assert values["miou"] == pytest.approx(jaccard_score(truth, predicted, average="macro"))
    # a resample weighs images: twice the first image is its pixels counted twice
    counts = np.ones((1, len(labels)))
    counts[0, 0] = 2
    twice = segmentation_scorer(scores, labels, 5)(counts)
    assert twice["pixel_accuracy"][0] == pytest.approx(accuracy_score(
        np.concatenate([truth, labels[0].ravel()]), np.concatenate([predicted, scores[0].argmax(0).ravel()])))


def test_nearest_neighbours_are_by_cosine_never_the_query_itself():
    rng = np.random.default_rng(2)
    embeddings = rng.normal(size=(2100, 8)).astype(np.float32)  # over two similarity blocks
    found = nearest_neighbours(embeddings * rng.uniform(0.5, 3, size=(2100, 1)), 3)  # the scale does not matter
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    np.testing.assert_array_equal(found, np.argsort(-similarity, axis=1, kind="stable")[:, :3])


def test_embedding_metrics_are_retrieval_over_the_eval_set():
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(10), 20)
    embeddings = rng.normal(size=(200, 16)) + 2.0 * np.eye(16)[labels]
    values = point(embedding_scorer(embeddings, labels), 200)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    ranked = np.argsort(-similarity, axis=1)
    assert values["nn_accuracy"] == pytest.approx(np.mean(labels[ranked[:, 0]] == labels))
    assert values["recall_at_k"] == pytest.approx(np.mean((labels[ranked[:, :RECALL_K]] == labels[:, None]).any(1)))
    assert 0.3 < values["nn_accuracy"] < values["recall_at_k"] < 1.0  # neither trivially 0 nor 1 here


def test_regression_metrics_match_sklearn():
    rng = np.random.default_rng(1)
    targets = rng.normal(size=(200, 3))
    predictions = targets + rng.normal(scale=0.3, size=(200, 3))
    values = point(regression_scorer(predictions, targets), 200)
    assert values["mae"] == pytest.approx(mean_absolute_error(targets, predictions))
    assert values["rmse"] == pytest.approx(np.sqrt(np.mean((predictions - targets) ** 2)))
    single = point(regression_scorer(predictions[:, :1], targets[:, 0]), 200)
    assert single["rmse"] == pytest.approx(np.sqrt(mean_squared_error(targets[:, 0], predictions[:, 0])))


def test_resamples_draw_n_samples_each_and_repeat_with_the_seed():
    first = np.concatenate(list(resample_counts(50, resamples=300, seed=4)))
    again = np.concatenate(list(resample_counts(50, resamples=300, seed=4)))
    other = np.concatenate(list(resample_counts(50, resamples=300, seed=5)))
    assert first.shape == (300, 50) and (first.sum(axis=1) == 50).all()
    assert np.array_equal(first, again) and not np.array_equal(first, other)


def test_interval_of_the_difference_covers_the_observed_difference():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 400)
    good = np.eye(3)[labels] + rng.normal(scale=0.5, size=(400, 3))
    bad = np.eye(3)[labels] + rng.normal(scale=1.2, size=(400, 3))
    ours, theirs = classification_scorer(good, labels, 3), classification_scorer(bad, labels, 3)
    observed = point(ours, 400)["accuracy"] - point(theirs, 400)["accuracy"]
    low, high = paired_intervals(ours, theirs, 400, resamples=500, seed=0, confidence=0.95)["accuracy"]
    assert low < observed < high
    assert low > 0  # the better model is better on every plausible resample
    narrow = paired_intervals(ours, theirs, 400, resamples=500, seed=0, confidence=0.5)["accuracy"]
    assert low < narrow[0] < narrow[1] < high
