import numpy as np
import pytest
import torch

from skewgate.common.compare import Tolerance, compare_close


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


def test_parse_tolerance():
    assert Tolerance.parse("1e-4,2e-5") == Tolerance(rtol=1e-4, atol=2e-5)
    with pytest.raises(ValueError):
        Tolerance.parse("abc")
