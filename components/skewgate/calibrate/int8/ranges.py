"""Range selection on a calibration histogram: minmax, percentile, entropy (KL), MSE, and `auto`.

Every method works on the robust histogram of `collect`, so values of set-aside outlier samples never move a
range, whatever the method. Errors are those of 8-bit asymmetric quantisation with zero representable, which is
what ONNX Runtime's QDQ quantiser builds from a (low, high) pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from skewgate.calibrate.int8.collect import Histogram

Method = Literal["auto", "minmax", "percentile", "entropy", "mse"]
METHODS: tuple[Method, ...] = ("minmax", "percentile", "entropy", "mse")
LEVELS = 256
PERCENTILE = 99.999  # per tail, as ONNX Runtime's default
ENTROPY_TARGET_BINS = 128  # quantised levels on the magnitude axis, as TensorRT's and ORT's entropy calibrators
MSE_GRID = np.geomspace(0.01, 1.0, 160)


@dataclass(frozen=True)
class Choice:
    low: float
    high: float
    method: str
    expected_error: float  # mean squared quantisation error over the histogram's values
    clipped: float  # fraction of calibration values outside [low, high], set-aside samples included


def choose(hist: Histogram, method: Method = "auto") -> Choice:
    if method == "auto":  # every method's range; keep the one with the least expected error
        return min((choose(hist, m) for m in METHODS), key=lambda c: (c.expected_error, c.method))
    low, high = {"minmax": _minmax, "percentile": _percentile, "entropy": _entropy, "mse": _mse}[method](hist)
    error = float(expected_error(hist, np.array([low]), np.array([high]))[0])
    return Choice(low, high, method, error, clipped_fraction(hist, low, high))


def expected_error(hist: Histogram, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Mean squared error per value for each candidate range, from bin centres: step²/12 inside the range,
    the squared distance to the range's edge outside it (prefix sums make each candidate O(1))."""
    centres = hist.centres
    counts = hist.counts.astype(np.float64)
    s0, s1, s2 = (np.concatenate([[0.0], np.cumsum(counts * centres**k)]) for k in range(3))
    lo, hi = np.minimum(low, 0.0), np.maximum(high, 0.0)
    k_lo = np.searchsorted(centres, lo, side="left")  # bins [0, k_lo) lie below the range
    k_hi = np.searchsorted(centres, hi, side="right")  # bins [k_hi, BINS) lie above it
    below = s2[k_lo] - 2 * lo * s1[k_lo] + lo**2 * s0[k_lo]
    above = (s2[-1] - s2[k_hi]) - 2 * hi * (s1[-1] - s1[k_hi]) + hi**2 * (s0[-1] - s0[k_hi])
    step = np.maximum(hi - lo, 1e-12) / (LEVELS - 1)
    inside = (s0[k_hi] - s0[k_lo]) * step**2 / 12
    return np.asarray(np.maximum(below, 0) + np.maximum(above, 0) + inside) / max(float(counts.sum()), 1.0)


def clipped_fraction(hist: Histogram, low: float, high: float) -> float:
    centres = hist.centres
    outside = int(hist.counts[(centres < low) | (centres > high)].sum()) + hist.below + hist.above
    return outside / max(hist.total, 1)


def _minmax(hist: Histogram) -> tuple[float, float]:
    return hist.low, hist.high


def _percentile(hist: Histogram) -> tuple[float, float]:
    cdf = np.cumsum(hist.counts) / max(int(hist.counts.sum()), 1)
    tail = 1.0 - PERCENTILE / 100
    edges = hist.edges
    return float(edges[int(np.searchsorted(cdf, tail))]), float(edges[int(np.searchsorted(cdf, 1.0 - tail)) + 1])


def _mse(hist: Histogram) -> tuple[float, float]:
    lows, highs = hist.low * MSE_GRID, hist.high * MSE_GRID
    best = int(np.argmin(expected_error(hist, lows, highs)))
    return float(lows[best]), float(highs[best])


def _entropy(hist: Histogram) -> tuple[float, float]:
    """The magnitude threshold that minimises KL(P ‖ Q) between the clipped distribution and its quantised
    version (the TensorRT procedure), searched over the histogram's bins."""
    centres = np.abs(hist.centres)
    top = max(abs(hist.low), abs(hist.high))
    magnitudes, mag_edges = np.histogram(centres, bins=len(centres), range=(0.0, top), weights=hist.counts)
    magnitudes[0] = 0  # exact zeros (most of a ReLU's output) say nothing about where to clip
    best_kl, best_i = np.inf, len(magnitudes)
    for i in range(ENTROPY_TARGET_BINS, len(magnitudes) + 1, 64):  # thresholds 3% of the range apart
        clipped = magnitudes[:i].astype(np.float64)
        reference = clipped.copy()
        reference[-1] += magnitudes[i:].sum()  # P: what the range makes of the data (outliers at its edge)
        if clipped.sum() == 0:
            continue
        kl = _kl(reference, _quantised(clipped))  # Q: the unclipped part at 128 levels
        if kl < best_kl:
            best_kl, best_i = kl, i
    threshold = float(mag_edges[best_i])
    return max(hist.low, -threshold), min(hist.high, threshold)


def _quantised(counts: np.ndarray) -> np.ndarray:
    """`counts` merged into ENTROPY_TARGET_BINS levels, each level's mass spread back over its occupied bins."""
    starts = np.linspace(0, counts.size, ENTROPY_TARGET_BINS + 1).astype(np.int64)[:-1]
    lengths = np.diff(np.append(starts, counts.size))
    mass = np.add.reduceat(counts, starts)
    occupied = np.add.reduceat((counts != 0).astype(np.float64), starts)
    level = np.divide(mass, occupied, out=np.zeros_like(mass), where=occupied > 0)
    return np.where(counts != 0, np.repeat(level, lengths), 0.0)


def _kl(reference: np.ndarray, quantised: np.ndarray) -> float:
    p = reference / reference.sum()
    q = quantised / max(quantised.sum(), 1e-300)
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
