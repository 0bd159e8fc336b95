"""The estimation method against what it claims to be: scikit-learn's isotonic regression and F1, the calibrated
probabilities of CBPE, and an interval that covers the accuracy the labels realise at its nominal rate."""

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.estimate.method.calibration import Reference, check_labels, probabilities
from skewgate.estimate.method.confusion import (
    Tally,
    confusion_of,
    expected_calibration_error,
    metric_of,
)
from tests.estimate import simulation as sim


def test_each_map_is_scikit_learns_isotonic_regression_clipped_weights_included():
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(3)
    scores = rng.random(500).round(2)  # ties, as scores quantised by a model have
    hits = (rng.random(500) < scores).astype(float)
    weights = rng.integers(0, 4, 500).astype(float)
    mine = Reference(np.stack([1 - scores, scores], axis=1), hits.astype(np.int64)).fit(weights).maps[0]
    theirs = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(scores, hits, sample_weight=weights)
    probe = np.linspace(-0.5, 1.5, 801)
    np.testing.assert_allclose(mine(probe), theirs.predict(probe), atol=1e-12)


def test_macro_f1_of_a_confusion_matrix_is_scikit_learns():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(4)
    labels, predicted = rng.integers(0, 4, 300), rng.integers(0, 3, 300)  # class 3 is never predicted
    confusion = confusion_of(labels, predicted, 4)
    assert float(metric_of(confusion, "macro_f1")) == pytest.approx(f1_score(labels, predicted, average="macro"))
    assert float(metric_of(confusion, "accuracy")) == pytest.approx(np.mean(labels == predicted))


def test_the_accuracy_estimate_is_the_mean_calibrated_probability_of_the_predicted_class():
    rng = np.random.default_rng(5)
    x, labels = sim.three_class(rng, 3000, sim.REFERENCE)
    scores = probabilities(x @ sim.W3.T, normalised=False, source="model")
    calibration = Reference(scores, labels).fit()
    current = probabilities(sim.three_class(rng, 1000, sim.INTO_THE_BOUNDARY)[0] @ sim.W3.T, normalised=False,
                            source="model")
    tally = Tally(calibration, [], seed=0)
    tally.add(current[:300])
    tally.add(current[300:])
    calibrated = calibration.apply(current)
    assert tally.estimate("accuracy") == pytest.approx(calibrated[np.arange(1000), current.argmax(axis=1)].mean())
    np.testing.assert_allclose(calibrated.sum(axis=1), 1.0)


def test_the_interval_does_not_depend_on_how_the_data_is_batched():
    rng = np.random.default_rng(6)
    _, scores, labels = sim.binary(rng, 2000, sim.REFERENCE)
    reference = Reference(probabilities(scores, normalised=False, source="model"), labels)
    current = probabilities(sim.binary(rng, 999, sim.INTO_THE_BOUNDARY)[1], normalised=False, source="model")
    intervals = []
    for cut in (999, 100, 7):
        tally = Tally(reference.fit(), reference.resampled(resamples=100, seed=1), seed=1)
        for start in range(0, 999, cut):
            tally.add(current[start:start + cut])
        intervals.append(tally.interval("accuracy", confidence=0.9))
    assert intervals[0] == intervals[1] == intervals[2]


@pytest.mark.parametrize("shift", [sim.INTO_THE_BOUNDARY, sim.IGNORED_FEATURE], ids=["into-boundary", "ignored"])
def test_the_interval_covers_the_realised_accuracy_at_its_nominal_rate_over_200_draws(shift):
    """90% intervals over 200 seeded draws of reference and current data (labels drawn from the truth): the
    coverage is nominal within what 200 draws can tell (binomial sd 0.021), and the estimate is unbiased."""
    covered, errors = 0, []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        _, ref_scores, ref_labels = sim.binary(rng, 1000, sim.REFERENCE)
        _, scores, labels = sim.binary(rng, 1000, shift)
        reference = Reference(probabilities(ref_scores, normalised=False, source="model"), ref_labels)
        tally = Tally(reference.fit(), reference.resampled(resamples=100, seed=seed), seed=seed)
        current = probabilities(scores, normalised=False, source="model")
        tally.add(current)
        realised = float(np.mean(current.argmax(axis=1) == labels))
        low, high = tally.interval("accuracy", confidence=0.9)
        covered += low <= realised <= high
        errors.append(tally.estimate("accuracy") - realised)
    assert 0.84 <= covered / 200 <= 0.96
    assert abs(np.mean(errors)) < 0.01 and np.std(errors) < 0.03


def test_without_calibration_uncertainty_the_interval_is_too_narrow():
    """The resampled calibrations are what make the interval honest: on a reference of 200 samples, 90% intervals
    from label noise alone (every resample the full fit) cover the realised accuracy in about a quarter of 100
    draws, and with the bootstrap calibrations near their nominal rate."""
    coverage = {}
    for honest in (False, True):
        covered = 0
        for seed in range(100):
            rng = np.random.default_rng(seed)
            _, ref_scores, ref_labels = sim.binary(rng, 200, sim.REFERENCE)
            _, scores, labels = sim.binary(rng, 2000, sim.INTO_THE_BOUNDARY)
            reference = Reference(probabilities(ref_scores, normalised=False, source="model"), ref_labels)
            resampled = reference.resampled(resamples=100, seed=seed) if honest else [reference.fit()] * 100
            tally = Tally(reference.fit(), resampled, seed=seed)
            current = probabilities(scores, normalised=False, source="model")
            tally.add(current)
            low, high = tally.interval("accuracy", confidence=0.9)
            covered += low <= float(np.mean(current.argmax(axis=1) == labels)) <= high
        coverage[honest] = covered / 100
    assert coverage[False] < 0.6 and coverage[True] >= 0.8, coverage


def test_ece_is_near_zero_for_calibrated_scores_and_large_for_overconfident_ones():
    rng = np.random.default_rng(7)
    p = rng.uniform(0.5, 1, 20000)
    labels = (rng.random(20000) >= p).astype(np.int64)  # class 0 with probability p
    calibrated = np.stack([p, 1 - p], axis=1)
    assert expected_calibration_error(calibrated, labels) < 0.01
    overconfident = np.stack([np.sqrt(p), 1 - np.sqrt(p)], axis=1)
    assert expected_calibration_error(overconfident, labels) > 0.05


@pytest.mark.parametrize(("outputs", "normalised", "expected"), [
    pytest.param(np.array([[0.0, np.log(3.0)]]), False, [[0.25, 0.75]], id="logits-softmax"),
    pytest.param(np.array([[0.2, 0.8]]), True, [[0.2, 0.8]], id="probabilities-as-they-are"),
    pytest.param(np.array([[0.0]]), False, [[0.5, 0.5]], id="one-logit-sigmoid"),
    pytest.param(np.array([0.9]), True, [[0.1, 0.9]], id="one-probability"),
])
def test_outputs_become_scores_per_class(outputs, normalised, expected):
    np.testing.assert_allclose(probabilities(outputs, normalised=normalised, source="m"), expected)


def test_a_dense_output_is_refused_naming_its_shape():
    with pytest.raises(InputError, match=r"segmentation .* not supported"):
        probabilities(np.zeros((2, 5, 4, 4)), normalised=False, source="m")


@pytest.mark.parametrize(("labels", "message"), [
    pytest.param(np.array([0.5, 1.2]), "not supported", id="regression-targets"),
    pytest.param(np.array([0, 3]), r"class indices in \[0, 3\)", id="class-out-of-range"),
    pytest.param(np.array([[0], [1]]), r"shape \(n,\)", id="two-dimensional"),
])
def test_labels_that_are_not_class_indices_are_refused(labels, message):
    with pytest.raises(InputError, match=message):
        check_labels(labels, 3, source="labels.npy", field=None)
