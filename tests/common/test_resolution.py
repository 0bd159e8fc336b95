"""What a sample count can resolve: exact at zero changes, Wilson's interval beside scipy's, and the sentence
both INT8 gates state (a budget finer than the samples is said, at the line and just beside it)."""

import math

import pytest

from skewgate.common.resolution import describe, rate_interval, samples_needed, smallest_resolvable


def test_none_of_n_changed_still_admits_one_minus_alpha_to_the_one_over_n():
    assert smallest_resolvable(64) == pytest.approx(1 - 0.05 ** (1 / 64))  # 4.57%
    assert 0.0457 < smallest_resolvable(64) < 0.0458
    # the chance of seeing no change in n samples at exactly that rate is the 5% the bound allows
    assert (1 - smallest_resolvable(64)) ** 64 == pytest.approx(0.05)
    assert smallest_resolvable(0) == 1.0


@pytest.mark.parametrize("budget", [0.01, 0.02, 0.001])
def test_the_samples_needed_are_the_fewest_that_resolve_the_budget(budget):
    needed = samples_needed(budget)
    assert smallest_resolvable(needed) <= budget < smallest_resolvable(needed - 1)
    assert samples_needed(0.01) == 299


def test_wilsons_interval_matches_scipys():
    stats = pytest.importorskip("scipy.stats")
    for changed, n in [(0, 64), (3, 128), (64, 64), (1, 1000)]:
        expected = stats.binomtest(changed, n).proportion_ci(method="wilson")
        low, high = rate_interval(changed, n)
        assert math.isclose(low, expected.low, abs_tol=1e-12) and math.isclose(high, expected.high, abs_tol=1e-12)


@pytest.mark.parametrize(
    ("n", "below"),
    [pytest.param(298, True, id="298-samples-cannot-resolve-1pct"), pytest.param(299, False, id="299-can")],
)
def test_the_sentence_says_when_the_budget_is_finer_than_the_samples(n, below):
    text = describe(0, n, 0.01)
    assert text.startswith(f"0/{n} samples changed (95% interval 0.00%–")
    assert ("the budget 1.00% is below that" in text) is below
    assert ("≥ 299 samples would" in text) is below
