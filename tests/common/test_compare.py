import numpy as np
import pytest
import torch

from skewgate.common import compare
from skewgate.common.compare import Tolerance, compare_along, compare_close


def _torch_says_close(actual, expected, tol):
    try:
        torch.testing.assert_close(torch.from_numpy(actual), torch.from_numpy(expected), rtol=tol.rtol,
                                   atol=tol.atol, equal_nan=True)
        return True
    except AssertionError:
        return False


@pytest.mark.parametrize("scale", [1e-6, 1e-5, 3e-5, 1e-4, 1e-2], ids=lambda s: f"noise-{s:g}")
def test_agrees_with_torch_assert_close(scale):
    rng = np.random.default_rng(1)
    expected = rng.normal(size=(50, 10)).astype(np.float32)
    actual = (expected + rng.normal(scale=scale, size=expected.shape)).astype(np.float32)
    tol = Tolerance.for_dtype(np.float32)
    assert compare_close(actual, expected, tol).ok == _torch_says_close(actual, expected, tol)


@pytest.mark.parametrize(
    ("dtype", "rtol", "atol"),
    [
        pytest.param("float32", 1.3e-6, 1e-5, id="float32"),
        pytest.param("float16", 1e-3, 1e-5, id="float16"),
        pytest.param("float64", 1e-7, 1e-7, id="float64"),
        pytest.param("int64", 0.0, 0.0, id="int64-exact"),
    ],
)
def test_dtype_defaults_are_torchs(dtype, rtol, atol):
    assert Tolerance.for_dtype(dtype) == Tolerance(rtol=rtol, atol=atol)


def test_reports_the_first_mismatch_and_counts():
    expected = np.zeros((2, 3), dtype=np.float32)
    actual = expected.copy()
    actual[1, 2] = 1.0
    result = compare_close(actual, expected, Tolerance(rtol=0, atol=1e-3))
    assert not result.ok
    assert (result.mismatched, result.total, result.first_mismatch) == (1, 6, (1, 2))
    assert result.max_abs == 1.0


def test_shape_mismatch_is_never_close():
    result = compare_close(np.zeros(3), np.zeros(4), Tolerance(1, 1))
    assert not result.ok
    assert "shape" in result.describe()


def test_nan_only_matches_nan():
    tol = Tolerance(1e-3, 1e-3)
    assert compare_close(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), tol).ok
    assert not compare_close(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), tol).ok
    assert not compare_close(np.array([np.inf]), np.array([1.0]), tol).ok


def test_a_scalar_output_compares():
    """A 0-d output (a model that returns one number) is compared like any other."""
    tol = Tolerance(rtol=0, atol=1e-3)
    assert compare_close(np.array(1.0, np.float32), np.array(1.0005, np.float32), tol).ok
    far = compare_close(np.array(1.0, np.float32), np.array(1.5, np.float32), tol)
    assert (far.ok, far.mismatched, far.first_mismatch) == (False, 1, ())


def test_parse_tolerance():
    assert Tolerance.parse("1e-4,2e-5") == Tolerance(rtol=1e-4, atol=2e-5)
    with pytest.raises(ValueError):
        Tolerance.parse("abc")


@pytest.mark.parametrize("block", [1, 7, 12_288], ids=lambda b: f"block-{b}")
@pytest.mark.parametrize(("shape", "axis"), [((40, 3, 5), 0), ((3, 40, 5), 1), ((3, 5, 40), -1), ((40,), 0),
                                             ((2000, 20), 0)], ids=lambda v: str(v))
def test_along_equals_compare_close_at_every_index(monkeypatch, block, shape, axis):
    """Whatever the blocks compare_along works in, each index's figures are compare_close's on that slice, with
    NaN, ±Inf and out-of-tolerance values among them."""
    monkeypatch.setattr(compare, "ALONG_BLOCK_ELEMENTS", block)
    rng = np.random.default_rng(7)
    expected = rng.normal(size=shape).astype(np.float32)
    actual = (expected + rng.normal(scale=2e-6, size=shape)).astype(np.float32)
    flat_a, flat_e = actual.reshape(-1), expected.reshape(-1)
    for index, (mine, theirs) in enumerate([(np.nan, np.nan), (np.inf, np.inf), (np.inf, 1.0), (np.nan, 0.0),
                                            (-np.inf, np.inf), (1.0, 0.0)]):
        flat_a[index * 7], flat_e[index * 7] = mine, theirs
    tol = Tolerance.for_dtype(np.float32)
    along = compare_along(actual, expected, tol, axis=axis)
    n = shape[axis]
    each = [compare_close(np.take(actual, i, axis), np.take(expected, i, axis), tol) for i in range(n)]
    assert along.max_abs.tolist() == [c.max_abs for c in each]
    assert along.worst_ratio.tolist() == [c.worst_ratio for c in each]
    assert along.mismatched.tolist() == [c.mismatched for c in each]
    assert 0 < int(along.ok.sum()) < n  # some indices within tolerance, some not


def test_along_empty_compares_nothing():
    along = compare_along(np.zeros((4, 0)), np.zeros((4, 0)), Tolerance(0, 0), axis=0)
    assert along.ok.tolist() == [True] * 4
    with pytest.raises(ValueError, match="shape"):
        compare_along(np.zeros((4, 2)), np.zeros((4, 3)), Tolerance(0, 0), axis=0)
