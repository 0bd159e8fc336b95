import numpy as np
import pytest

from skewgate.drift.stats.mmd import (
    BANDWIDTH_FACTORS,
    RandomFeatures,
    gaussian_null_pvalue,
    median_bandwidth,
    mmd_exact,
    mmd_rff,
)

PERMUTATIONS = 200


def _samples(shift, seed=0, n=300, m=350, d=5):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    y[:, 0] += shift
    return x, y


@pytest.mark.parametrize("shift", [0.0, 0.4], ids=["no-drift", "shift"])
def test_random_features_agree_with_the_exact_kernel_where_both_run(shift):
    x, y = _samples(shift)
    bandwidth = median_bandwidth(x, y, rng=np.random.default_rng(0))
    bandwidths = tuple(bandwidth * f for f in BANDWIDTH_FACTORS)
    exact, p_exact = mmd_exact(x, y, bandwidths, permutations=PERMUTATIONS, rng=np.random.default_rng(1))
    rff = RandomFeatures.draw(x.shape[1], bandwidths, features=3000, seed=0)
    approx, p_rff = mmd_rff(x, y, rff, permutations=PERMUTATIONS, rng=np.random.default_rng(1))
    assert approx == pytest.approx(exact, abs=2e-3)
    assert (p_exact < 0.05) == (p_rff < 0.05) == (shift > 0)


def test_permutation_pvalue_is_k_plus_one_over_p_plus_one():
    x, y = _samples(3.0)
    rff = RandomFeatures.draw(5, (1.0, 2.0), features=200, seed=0)
    _, p = mmd_rff(x, y, rff, permutations=PERMUTATIONS, rng=np.random.default_rng(0))
    assert p == pytest.approx(1 / (PERMUTATIONS + 1))  # the smallest possible value, never 0


def test_gaussian_null_agrees_with_permutations():
    for shift in (0.0, 0.4):
        x, y = _samples(shift, seed=5, n=2000, m=2000)
        rff = RandomFeatures.draw(5, (1.5, 3.0, 6.0), features=510, seed=0)
        stat, p_perm = mmd_rff(x, y, rff, permutations=PERMUTATIONS, rng=np.random.default_rng(0))
        mean = rff.mean_embedding(x)
        p_gauss = gaussian_null_pvalue(stat, rff.covariance(x, mean), len(x), len(y), draws=2000,
                                       rng=np.random.default_rng(0))
        assert (p_perm < 0.05) == (p_gauss < 0.05) == (shift > 0)


def test_chunking_does_not_change_the_result(monkeypatch):
    import skewgate.drift.stats.mmd as mmd

    x, y = _samples(0.2, n=700, m=500)
    rff = RandomFeatures.draw(5, (1.0, 2.0), features=64, seed=0)
    whole = mmd_rff(x, y, rff, permutations=20, rng=np.random.default_rng(0))
    monkeypatch.setattr(mmd, "CHUNK_ROWS", 97)
    chunked = mmd_rff(x, y, rff, permutations=20, rng=np.random.default_rng(0))
    assert chunked[0] == pytest.approx(whole[0], rel=1e-5) and chunked[1] == whole[1]


def test_median_bandwidth_of_identical_points_falls_back_to_one():
    same = np.zeros((10, 3))
    assert median_bandwidth(same, same, rng=np.random.default_rng(0)) == 1.0


def test_streamed_gaussian_null_holds_its_level_and_is_never_zero():
    """The null the streamed path uses (reference covariance from a row sample): under no drift about α of
    the runs flag at α, and even a huge shift gets p = 1/(draws + 1), not 0."""
    rng = np.random.default_rng(11)
    rff = RandomFeatures.draw(4, (1.0, 2.0, 4.0), features=96, seed=0)
    pvalues = []
    for _ in range(300):
        x, y = rng.normal(size=(600, 4)), rng.normal(size=(400, 4))
        phi = rff.transform(x[:300]).astype(np.float64)
        stat = float(np.sum((rff.mean_embedding(x) - rff.mean_embedding(y)) ** 2))
        pvalues.append(gaussian_null_pvalue(stat, np.cov(phi, rowvar=False), 600, 400, draws=500, rng=rng))
    flagged = np.mean(np.array(pvalues) < 0.05)
    assert flagged <= 0.05 + 2.5 * np.sqrt(0.05 * 0.95 / 300)
    assert flagged >= 0.01  # not a test that never fires
    x, y = rng.normal(size=(600, 4)), rng.normal(size=(400, 4)) + 3
    phi = rff.transform(x).astype(np.float64)
    stat = float(np.sum((rff.mean_embedding(x) - rff.mean_embedding(y)) ** 2))
    assert gaussian_null_pvalue(stat, np.cov(phi, rowvar=False), 600, 400, draws=500, rng=rng) == 1 / 501
