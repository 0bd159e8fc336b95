import numpy as np
import pytest
from scipy import stats

from skewgate.drift.stats.sketch import QuantileSketch, SketchBuilder, ks_between, ks_bounds, merge_sketches


def _stream(values, *, chunk, exact_rows=0, capacity=1024):
    builder = SketchBuilder(capacity=capacity, exact_rows=exact_rows)
    for start in range(0, len(values), chunk):
        builder.add(values[start:start + chunk])
    return builder.result()


@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("shift", [0.0, 0.03, 0.3], ids=["same", "small-shift", "shift"])
def test_streamed_sketches_stay_within_their_computed_error(ties, shift):
    rng = np.random.default_rng(int(shift * 100) + ties)
    a, b = rng.normal(size=300_000), rng.normal(size=200_000) + shift
    if ties:
        a, b = np.round(a, 1), np.round(b, 1)
    exact = stats.ks_2samp(a, b).statistic
    d, error, least = ks_bounds(_stream(a, chunk=7_000), _stream(b, chunk=10_000))
    assert abs(d - exact) <= error + 1e-12
    assert max(d - error, 0.0) - 1e-12 <= least <= exact + 1e-12  # what the p-value is computed from
    assert error < 0.005  # a tenth of the default effect floor, with capacity 1024 only


def test_exact_while_the_data_fits_then_bounded_memory():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50_000), rng.normal(size=40_000) + 0.1
    fits = _stream(a, chunk=4_000, exact_rows=60_000)
    assert fits.exact and fits.n == 50_000
    assert ks_between(fits, QuantileSketch.of(b)) == (pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12), 0.0)
    big = _stream(np.tile(a, 8), chunk=4_000, exact_rows=60_000, capacity=512)
    assert not big.exact and big.n == 400_000 and len(big.values) <= 512 + 2


def test_few_distinct_values_stay_exact_at_any_size():
    values = np.random.default_rng(1).integers(0, 7, size=500_000).astype(float)
    sketch = _stream(values, chunk=10_000, capacity=64)
    assert sketch.exact and sketch.error_bound == 0.0 and len(sketch.values) == 7
    other = np.random.default_rng(2).integers(0, 8, size=30_000).astype(float)
    assert ks_between(sketch, QuantileSketch.of(other))[0] == pytest.approx(stats.ks_2samp(values, other).statistic)


def test_merging_partials_in_any_grouping_keeps_the_bound():
    rng = np.random.default_rng(3)
    parts = [rng.normal(size=n) for n in (120_000, 5_000, 80_000, 33_333)]
    sketches = [_stream(p, chunk=9_000, exact_rows=10_000) for p in parts]
    left = sketches[0]
    for s in sketches[1:]:
        left = merge_sketches(left, s, capacity=1024, exact_rows=10_000)
    right = merge_sketches(merge_sketches(sketches[0], sketches[1], capacity=1024, exact_rows=10_000),
                           merge_sketches(sketches[2], sketches[3], capacity=1024, exact_rows=10_000),
                           capacity=1024, exact_rows=10_000)
    everything, other = np.concatenate(parts), rng.normal(size=20_000) + 0.05
    exact = stats.ks_2samp(everything, other).statistic
    for merged in (left, right):
        assert merged.n == everything.size
        d, error = ks_between(merged, QuantileSketch.of(other))
        assert abs(d - exact) <= error + 1e-12 and error < 0.005
        assert merged.values[0] == everything.min() and merged.values[-1] == everything.max()


def test_quantiles_and_empty_sketches():
    values = np.arange(1, 100_001, dtype=float)
    sketch = _stream(values, chunk=5_000, capacity=256)
    assert sketch.quantiles([0, 0.5, 1]) == pytest.approx([1, 50_000, 100_000], rel=0.02)
    empty = QuantileSketch.of(np.array([np.nan, np.inf]))
    assert empty.n == 0 and np.isnan(empty.quantiles([0.5])).all()
    d, _ = ks_between(empty, sketch)
    assert np.isnan(d)
