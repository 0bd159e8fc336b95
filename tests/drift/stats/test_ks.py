import numpy as np
import pytest
from scipy import stats

from skewgate.drift.stats.ks import EXACT_MAX_PRODUCT, adjust, chi_square, ks_pvalue
from skewgate.drift.stats.sketch import QuantileSketch, ks_between


def ks_statistic(reference, current):
    d, error = ks_between(reference, QuantileSketch.of(current))
    assert error == 0 or not reference.exact
    return d


@pytest.mark.parametrize(("n", "m", "shift"), [(10, 12, 0.0), (40, 30, 0.5), (80, 100, 1.0), (500, 700, 0.2)],
                         ids=lambda v: str(v))
def test_statistic_and_exact_pvalue_match_scipy(n, m, shift):
    rng = np.random.default_rng(n * m)
    a, b = rng.normal(size=n), rng.normal(size=m) + shift
    expected = stats.ks_2samp(a, b, method="exact" if n * m <= EXACT_MAX_PRODUCT else "asymp")
    d = ks_statistic(QuantileSketch.of(a), b)
    assert d == pytest.approx(expected.statistic, abs=1e-12)
    p = ks_pvalue(d, n, m)
    if n * m <= EXACT_MAX_PRODUCT:
        assert p == pytest.approx(expected.pvalue, rel=1e-6)
    else:  # both asymptotic; scipy adds a finite-sample correction
        assert p == pytest.approx(expected.pvalue, rel=0.2)


def test_ties_are_handled_like_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 5, 300).astype(float), rng.integers(0, 6, 200).astype(float)
    assert ks_statistic(QuantileSketch.of(a), b) == pytest.approx(stats.ks_2samp(a, b).statistic)


@pytest.mark.parametrize("q", [16, 256, 4096])
@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
def test_sketch_stays_within_its_stated_error_bound(q, ties):
    rng = np.random.default_rng(q)
    a = rng.normal(size=20_000)
    b = rng.normal(size=5_000) + 0.05
    if ties:
        a, b = np.round(a, 1), np.round(b, 1)
    sketch = QuantileSketch.of(a).compress(q)
    exact = ks_statistic(QuantileSketch.of(a), b)
    assert abs(ks_statistic(sketch, b) - exact) <= sketch.error_bound + 1e-12
    assert sketch.error_bound <= 1.0 / q + 2.0 / a.size


@pytest.mark.parametrize("x", [0.1, 0.3, 0.5, 1.0, 1.36, 2.0, 4.0])
def test_kolmogorov_survival_matches_scipy(x):
    from skewgate.drift.stats.ks import kolmogorov_sf

    assert kolmogorov_sf(x) == pytest.approx(stats.kstwobign.sf(x), rel=1e-9, abs=1e-15)


def test_chi_square_matches_scipy():
    ref, cur = np.array([500, 300, 200, 7]), np.array([230, 170, 90, 12])
    statistic, pvalue, _ = chi_square(ref, cur)
    expected = stats.chi2_contingency(np.vstack([ref, cur]), correction=False)
    assert (statistic, pvalue) == pytest.approx((expected[0], expected[1]))


def test_pvalues_are_never_exactly_zero_or_above_one():
    assert 0 <= ks_pvalue(1.0, 5000, 5000) <= 1
    assert ks_pvalue(0.0, 10, 10) == 1.0


def test_benjamini_hochberg_matches_scipy_and_bonferroni_multiplies():
    p = np.random.default_rng(0).uniform(size=50) ** 3
    assert np.allclose(adjust(p, "bh"), stats.false_discovery_control(p))
    assert np.allclose(adjust(p, "bonferroni"), np.minimum(1, p * 50))
    assert adjust(np.array([]), "bh").size == 0


def test_chi_square_detects_a_category_shift_and_reports_cramers_v():
    _, p_same, v_same = chi_square(np.array([500, 300, 200]), np.array([250, 150, 100]))
    _, p_shift, v_shift = chi_square(np.array([500, 300, 200]), np.array([100, 150, 250]))
    assert p_same > 0.5 and v_same < 0.01
    assert p_shift < 1e-10 and v_shift > 0.2
    assert chi_square(np.array([10]), np.array([5])) == (0.0, 1.0, 0.0)  # one category: nothing to test
