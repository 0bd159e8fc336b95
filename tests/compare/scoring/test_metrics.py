"""The weighted metrics equal scikit-learn's on the eval set itself; the paired bootstrap is seeded and covers
the observed difference."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, mean_absolute_error, mean_squared_error

from skewgate.compare.scoring.metrics import (
    classification_scorer,
    paired_intervals,
    point,
    regression_scorer,
    resample_counts,
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
