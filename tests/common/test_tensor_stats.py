import numpy as np
import pytest

from skewgate.common.tensor_stats import sha256_array, summarize


def test_float_statistics_match_numpy():
    values = np.random.default_rng(0).normal(size=(100, 10)).astype(np.float32)
    stats = summarize("x", "torch.input", values)
    assert stats.shape == (100, 10)
    assert stats.dtype == "float32"
    assert stats.count == 1000
    assert stats.mean == pytest.approx(float(values.astype(np.float64).mean()))
    assert stats.std == pytest.approx(float(values.astype(np.float64).std()))
    assert stats.p50 == pytest.approx(float(np.median(values.astype(np.float64))))
    assert stats.min <= stats.p01 <= stats.p50 <= stats.p99 <= stats.p999 <= stats.max


def test_nan_and_inf_are_counted_not_propagated():
    values = np.array([1.0, np.nan, np.inf, -np.inf, 3.0], dtype=np.float32)
    stats = summarize("x", "s", values)
    assert (stats.nan_count, stats.inf_count) == (1, 2)
    assert (stats.min, stats.max, stats.mean) == (1.0, 3.0, 2.0)


@pytest.mark.parametrize(
    "array",
    [
        pytest.param(np.zeros((0, 3), dtype=np.float32), id="empty"),
        pytest.param(np.array([np.nan, np.nan]), id="all-nan"),
    ],
)
def test_no_finite_values_gives_null_statistics(array):
    stats = summarize("x", "s", array)
    assert stats.mean is None and stats.p99 is None and stats.min is None
    assert stats.count == array.size


@pytest.mark.parametrize(
    ("array", "mean"),
    [
        pytest.param(np.array([1, 2, 3, 6], dtype=np.int64), 3.0, id="int64"),
        pytest.param(np.array([0, 0, 1, 1], dtype=np.uint8), 0.5, id="uint8"),
        pytest.param(np.array([True, False, False, False]), 0.25, id="bool"),
        # float16 sums overflow at 65504: the mean must still be right
        pytest.param(np.full(10, 60000, dtype=np.float16), 59999.9, id="float16-large"),
    ],
)
def test_integer_bool_and_float16_inputs(array, mean):
    stats = summarize("x", "s", array)
    assert stats.mean == pytest.approx(mean, rel=1e-4)
    assert stats.dtype == str(array.dtype)


def test_zero_fraction():
    assert summarize("x", "s", np.array([0.0, 0.0, 1.0, 2.0])).zero_fraction == 0.5


def test_hash_depends_on_bytes_and_dtype():
    a = np.arange(4, dtype=np.float32)
    assert summarize("x", "s", a).sha256 == sha256_array(a.copy())
    assert sha256_array(a) != sha256_array(a.astype(np.float64))
    # a non-contiguous view hashes as its contiguous copy
    b = np.arange(8, dtype=np.float32)[::2]
    assert sha256_array(b) == sha256_array(np.ascontiguousarray(b))
