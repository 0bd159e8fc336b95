"""`summarize`: the TensorStats of one array, robust to empty, integer, boolean and float16 input."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from skewgate.common.verdict import TensorStats


def sha256_array(array: npt.ArrayLike) -> str:
    """SHA-256 of the array's bytes in C order: equal arrays of equal dtype hash equal."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def summarize(name: str, stage: str, array: npt.ArrayLike) -> TensorStats:
    """Statistics over the finite values; NaN and Inf are counted, never propagated into the statistics."""
    arr = np.asarray(array)
    count = int(arr.size)
    nan_count = inf_count = 0
    if arr.dtype.kind in "fc":
        nan_count = int(np.isnan(arr).sum())
        inf_count = int(np.isinf(arr).sum())
    # float64 for the arithmetic: float16 sums overflow, and integer std needs floats anyway.
    values = arr.astype(np.float64, copy=False).ravel() if arr.dtype.kind in "biuf" else np.zeros(0)
    finite = values[np.isfinite(values)]
    stats: dict[str, float | None]
    if finite.size:
        p01, p50, p99, p999 = (float(q) for q in np.quantile(finite, [0.01, 0.5, 0.99, 0.999]))
        stats = {
            "min": float(finite.min()),
            "max": float(finite.max()),
            "mean": float(finite.mean()),
            "std": float(finite.std()),
            "p01": p01, "p50": p50, "p99": p99, "p999": p999,
        }
    else:
        stats = dict.fromkeys(("min", "max", "mean", "std", "p01", "p50", "p99", "p999"))
    zero_fraction = float((arr == 0).sum()) / count if count and arr.dtype.kind in "biufc" else None
    return TensorStats(
        name=name,
        stage=stage,
        shape=tuple(int(d) for d in arr.shape),
        dtype=str(arr.dtype),
        count=count,
        nan_count=nan_count,
        inf_count=inf_count,
        zero_fraction=zero_fraction,
        sha256=sha256_array(arr),
        **stats,
    )
