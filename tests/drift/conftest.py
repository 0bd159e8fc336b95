import numpy as np
import pandas as pd
import pytest


def make_frame(n, *, seed, shift=0.0, corr=False, cat_probs=(0.5, 0.3, 0.2), scale_f3=1.0):
    """8 standard-normal features and one category; knobs plant each kind of drift."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8))
    if corr:  # same marginals, new dependence: invisible to KS per feature
        x[:, 1] = 0.9 * x[:, 0] + np.sqrt(1 - 0.81) * x[:, 1]
    x[:, 2] += shift
    x[:, 3] *= scale_f3
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(8)])
    frame["color"] = rng.choice(["red", "green", "blue"], size=n, p=list(cat_probs))
    return frame


@pytest.fixture
def write(tmp_path):
    def _write(name, frame):
        path = tmp_path / f"{name}.parquet"
        frame.to_parquet(path)
        return path

    return _write


def with_pixels_and_gaps(frame, *, seed):
    """`frame` plus two features whose deciles are not 0.10 each: `pixel`, 60 % zeros then 1..255 (six deciles
    collapse onto 0 and the seventh holds 0.6+), and `gappy`, standard normal with 5 % NaN."""
    rng = np.random.default_rng(seed + 1000)
    n = len(frame)
    frame = frame.copy()
    frame["pixel"] = np.where(rng.random(n) < 0.6, 0.0, rng.integers(1, 256, n).astype(float))
    frame["gappy"] = np.where(rng.random(n) < 0.05, np.nan, rng.normal(size=n))
    return frame
