import numpy as np
import pytest

from skewgate.calibrate.int8 import collect
from skewgate.calibrate.int8.ranges import choose


def fake_runner(feeds):
    """Stands in for the ONNX session: the input and a ReLU of a scaled copy, batch axis first."""
    x = feeds["x"]
    return {"x": x, "y": np.maximum(2 * x, 0)}


def stats(data, batch_size, method="auto"):
    first = collect.first_pass(lambda feeds: collect.extremes_of(fake_runner(feeds)), {"x": data}, ["x", "y"],
                               batch_size=batch_size)
    bounds = {n: collect.robust_bounds(first[n]) for n in first}
    hists = collect.second_pass(fake_runner, {"x": data}, first, bounds, batch_size=batch_size)
    return bounds, hists, {n: choose(h, method) for n, h in hists.items()}


def test_histogram_counts_values_beyond_its_range_apart():
    hist = collect.Histogram(-1.0, 1.0)
    hist.add(np.array([-2.0, -1.0, 0.0, 0.999, 1.0, 5.0]))
    assert (hist.below, hist.above, int(hist.counts.sum()), hist.total) == (1, 1, 4, 6)
    assert hist.counts[0] == 1 and hist.counts[-1] == 1 and hist.counts[-2] == 1  # 1.0 lands in the last bin


def test_outlier_samples_never_set_the_range():
    data = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)
    data[7, 3], data[150, 9] = 1000.0, -800.0
    bounds, hists, choices = stats(data, 32, method="minmax")
    assert bounds["x"].set_aside == (7, 150)
    assert -6 < bounds["x"].low < -2 and 2 < bounds["x"].high < 6
    assert hists["x"].below == 1 and hists["x"].above == 1
    assert choices["x"].high < 6  # even minmax


def test_at_most_a_few_samples_are_set_aside():
    data = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
    data[:50] *= 100  # half the set is large: that is the distribution, not an outlier
    bounds, _hists, _choices = stats(data, 32)
    assert len(bounds["x"].set_aside) <= 2
    assert bounds["x"].high > 100


@pytest.mark.parametrize("method", ["auto", "minmax", "percentile", "entropy", "mse"])
def test_ranges_do_not_depend_on_order_or_batch_size(method):
    data = np.random.default_rng(1).standard_t(3, size=(200, 4, 4)).astype(np.float32)
    data[42] *= 50
    _b1, h1, c1 = stats(data, 32, method)
    _b2, h2, c2 = stats(data[np.random.default_rng(2).permutation(200)], 7, method)
    for name in ("x", "y"):
        assert np.array_equal(h1[name].counts, h2[name].counts)
        assert (c1[name].low, c1[name].high) == (c2[name].low, c2[name].high)


def test_memory_estimate_counts_one_batch_and_the_histograms(tiny_onnx):
    import onnx

    estimate = collect.memory_estimate(onnx.load(tiny_onnx), ["x", "y"], batch_size=10, samples=100)
    assert estimate == 4 * 10 * 4 + 4 * 10 * 2 + 2 * (collect.BINS * 8 + 100 * 16)
