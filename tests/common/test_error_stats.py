"""RunningError streams |a − e| statistics batch by batch; they must agree with a one-shot float64 comparison
(`compare_close`, torch.testing.assert_close semantics) of all the batches at once."""

from __future__ import annotations

import math

import numpy as np
import pytest

from skewgate.common.compare import Tolerance, compare_close
from skewgate.common.error_stats import RESERVOIR, RunningError

TOLERANCE = Tolerance(rtol=1e-3, atol=1e-4)


def _stream(actual: np.ndarray, expected: np.ndarray, batch: int, tolerance: Tolerance = TOLERANCE) -> RunningError:
    err, rng = RunningError(tolerance), np.random.default_rng(0)
    for start in range(0, len(actual), batch):
        err.update(actual[start : start + batch], expected[start : start + batch], rng)
    return err


def _pair(seed: int, shape: tuple[int, ...], noise: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    expected = rng.normal(size=shape).astype(np.float32)
    return (expected + noise * rng.normal(size=shape)).astype(np.float32), expected


@pytest.mark.parametrize(("seed", "shape", "noise"), [
    (0, (64, 16, 8, 8), 1e-5), (1, (50, 7), 1e-2), (2, (33, 4, 3), 0.0), (3, (128, 1000), 3e-4),
], ids=["conv-like-within", "far-out", "identical", "logits-borderline"])
def test_streamed_statistics_agree_with_one_comparison_of_everything(seed, shape, noise):
    actual, expected = _pair(seed, shape, noise)
    err, reference = _stream(actual, expected, batch=16), compare_close(actual, expected, TOLERANCE)
    assert err.count == actual.size
    assert err.max_abs == pytest.approx(reference.max_abs, rel=1e-5, abs=1e-12)
    assert err.sum_abs / err.count == pytest.approx(reference.mean_abs, rel=1e-4, abs=1e-12)
    assert err.max_rel == pytest.approx(reference.max_rel, rel=1e-4, abs=1e-12)
    assert err.worst_ratio == pytest.approx(reference.worst_ratio, rel=1e-4, abs=1e-12)
    assert err.ok == reference.ok
    noise_energy = float(np.sum((actual.astype(np.float64) - expected) ** 2))
    expected_sqnr = math.inf if noise_energy == 0 else 10 * math.log10(np.sum(expected.astype(np.float64) ** 2)
                                                                      / noise_energy)
    assert err.sqnr_db == pytest.approx(expected_sqnr, rel=1e-4)


def test_an_infinity_on_both_sides_is_no_divergence():
    # a causal attention mask: −inf above the diagonal, identically on both sides
    expected = np.triu(np.full((4, 8, 8), -np.inf, dtype=np.float32), k=1)
    actual = expected + np.float32(1e-7) * np.tril(np.ones((8, 8), dtype=np.float32))
    err = _stream(actual, expected, batch=2)
    assert err.ok and err.max_abs == pytest.approx(1e-7)
    assert math.isfinite(err.sqnr_db) or err.noise == 0


@pytest.mark.parametrize(("actual", "expected", "ok", "max_abs"), [
    ([1.0, np.nan], [1.0, np.nan], True, 0.0),
    ([1.0, np.nan], [1.0, 2.0], False, math.inf),
    ([np.inf, 1.0], [-np.inf, 1.0], False, math.inf),
    ([np.inf, 1.0], [3.0, 1.0], False, math.inf),
    ([5.0, 1.0], [np.inf, 1.0], False, math.inf),
], ids=["nan-both-sides", "nan-one-side", "opposite-infinities", "inf-against-finite", "finite-against-inf"])
def test_non_finite_values_follow_assert_close(actual, expected, ok, max_abs):
    err = _stream(np.array(actual, dtype=np.float32), np.array(expected, dtype=np.float32), batch=2)
    assert err.ok is ok and err.max_abs == max_abs
    assert compare_close(np.array(actual), np.array(expected), TOLERANCE).ok is ok


def test_a_shape_mismatch_is_recorded_not_dropped():
    err = RunningError(TOLERANCE)
    err.update(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), np.random.default_rng(0))
    assert not err.ok and err.shape_mismatch == "shape (2, 3) vs (3, 2)"


def test_nothing_compared_is_not_ok():
    assert not RunningError(TOLERANCE).ok


def test_the_reservoir_is_bounded_and_gives_the_median():
    actual, expected = _pair(4, (400, 250), 1e-3)
    err = _stream(actual, expected, batch=50)
    assert sum(s.size for s in err.sample) == RESERVOIR
    true_median = float(np.median(np.abs(actual.astype(np.float64) - expected)))
    assert err.summary()["median_abs"] == pytest.approx(true_median, rel=0.05)


@pytest.mark.parametrize(
    ("scale", "failing"),
    [
        pytest.param(1.0, {}, id="at-the-tolerance-none"),
        pytest.param(1.01, {13: 1.01}, id="just-beyond-the-sample-named"),
    ],
)
def test_the_samples_out_of_tolerance_are_named_by_index(scale, failing):
    """Which samples fail, by their index in the whole stream: what `rounding` grounds next."""
    tolerance = Tolerance(rtol=0.0, atol=1e-3)
    expected = np.zeros((4, 3, 2), np.float32)
    actual = expected.copy()
    actual[1, 2, 0] = np.float32(1e-3 * scale)
    err = RunningError(tolerance)
    err.update(expected, expected, np.random.default_rng(0), samples=range(8, 12))
    err.update(actual, expected, np.random.default_rng(0), samples=range(12, 16))
    assert err.failing == pytest.approx(failing, rel=1e-4)
    unnamed = RunningError(tolerance)
    unnamed.update(actual, expected, np.random.default_rng(0))  # no sample indices: none named
    assert unnamed.failing == {}
