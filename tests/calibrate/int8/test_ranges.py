import numpy as np
import pytest

from skewgate.calibrate.int8.collect import Histogram
from skewgate.calibrate.int8.ranges import METHODS, choose, expected_error


def histogram(values, low=None, high=None):
    hist = Histogram(float(values.min() if low is None else low), float(values.max() if high is None else high))
    hist.add(values)
    return hist


@pytest.fixture(scope="module")
def heavy_tail():
    rng = np.random.default_rng(0)
    return histogram(rng.standard_t(3, 200_000))


def test_minmax_is_the_histogram_range(heavy_tail):
    choice = choose(heavy_tail, "minmax")
    assert (choice.low, choice.high) == (heavy_tail.low, heavy_tail.high)
    assert choice.clipped == 0


@pytest.mark.parametrize("method", ["percentile", "entropy", "mse"])
def test_clipping_methods_clip_a_heavy_tail(heavy_tail, method):
    choice = choose(heavy_tail, method)
    assert choice.high < heavy_tail.high and choice.low > heavy_tail.low
    assert 0 < choice.clipped < 0.05


def test_mse_has_the_least_expected_error_of_its_grid_and_beats_minmax(heavy_tail):
    assert choose(heavy_tail, "mse").expected_error < choose(heavy_tail, "minmax").expected_error


def test_auto_keeps_the_least_expected_error(heavy_tail):
    auto = choose(heavy_tail, "auto")
    assert auto.expected_error == min(choose(heavy_tail, m).expected_error for m in METHODS)


def test_expected_error_grows_when_the_range_clips_too_much():
    hist = histogram(np.random.default_rng(0).uniform(-1, 1, 50_000))
    errors = expected_error(hist, np.array([-1.0, -0.5, -0.1]), np.array([1.0, 0.5, 0.1]))
    assert errors[0] < errors[1] < errors[2]


def test_non_negative_tensor_keeps_zero_as_its_low_end():
    hist = histogram(np.abs(np.random.default_rng(0).normal(size=10_000)))
    assert all(choose(hist, m).low >= 0 for m in METHODS)
