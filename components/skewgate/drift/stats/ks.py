"""Two-sample Kolmogorov–Smirnov per feature against a reference ECDF, with exact p-values for small samples
and the asymptotic Kolmogorov distribution for large ones; chi-square for categorical columns; multiple-testing
correction.

The reference side is a `ReferenceECDF`: either every sorted value (exact) or a quantile sketch of `q + 1`
order statistics, for which the reference CDF — and therefore the KS statistic — is off by at most
`1/q + 1/n` (the ranks between two stored order statistics are unknown, at most `n/q` of them).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Correction = Literal["bh", "bonferroni"]
EXACT_MAX_PRODUCT = 10_000  # n·m up to which the exact lattice-path p-value is used (O(n·m) time)


@dataclass(frozen=True)
class ReferenceECDF:
    """Sorted reference values at known ranks: `values[k]` is the `ranks[k]`-th smallest of `n` (0-based).
    `ranks` is None when every value is kept (value k has rank k): no index array as large as the data."""

    values: np.ndarray
    ranks: np.ndarray | None
    n: int

    @classmethod
    def exact(cls, column: npt.ArrayLike) -> ReferenceECDF:
        values = np.sort(_floating(column))
        return cls(values=values, ranks=None, n=int(values.size))

    @classmethod
    def sketch(cls, column: npt.ArrayLike, *, q: int) -> ReferenceECDF:
        """Keep `q + 1` evenly spaced order statistics (the minimum and maximum among them)."""
        values = np.sort(_floating(column))
        n = int(values.size)
        if n <= q + 1:
            return cls(values=values, ranks=None, n=n)
        ranks = np.unique(np.round(np.linspace(0, n - 1, q + 1)).astype(np.int64))
        return cls(values=values[ranks], ranks=ranks, n=n)

    @property
    def error_bound(self) -> float:
        """Largest possible error of the reference CDF, hence of the KS statistic."""
        if self.ranks is None:
            return 0.0
        return float(np.max(np.diff(self.ranks))) / self.n + 1.0 / self.n

    def cdf(self, points: np.ndarray) -> np.ndarray:
        """F(x) = share of reference values ≤ x; between stored order statistics, the lower bound."""
        index = np.searchsorted(self.values, points, side="right")
        if self.ranks is None:
            return index / self.n
        below = np.where(index > 0, self.ranks[np.maximum(index - 1, 0)] + 1, 0)
        return np.asarray(below, dtype=np.float64) / self.n


def _floating(column: npt.ArrayLike) -> np.ndarray:
    """float32 stays float32 (half the memory of a copy to float64); anything else becomes float64."""
    array = np.asarray(column)
    return array if array.dtype in (np.float32, np.float64) else array.astype(np.float64)


def ks_statistic(reference: ReferenceECDF, current: npt.ArrayLike) -> float:
    """sup |F_ref − F_cur|, evaluated at every point where either step function jumps (right limits)."""
    cur = np.sort(_floating(current))
    if cur.size == 0 or reference.n == 0:
        return float("nan")
    points = np.concatenate([cur, reference.values])
    f_cur = np.searchsorted(cur, points, side="right") / cur.size
    return float(np.max(np.abs(reference.cdf(points) - f_cur)))


def ks_pvalue(d: float, n: int, m: int) -> float:
    """P(D ≥ d) under H0: exact (lattice paths) when n·m ≤ EXACT_MAX_PRODUCT, else asymptotic."""
    if not math.isfinite(d) or n == 0 or m == 0:
        return float("nan")
    if n * m <= EXACT_MAX_PRODUCT:
        return _exact_pvalue(d, n, m)
    return kolmogorov_sf(d * math.sqrt(n * m / (n + m)))


@functools.lru_cache(maxsize=1024)  # a pure function, asked once per feature with the same sizes (512 features)
def critical_d(alpha: float, n: int, m: int) -> float:
    """The smallest D whose p-value (`ks_pvalue`) is at most `alpha`: 1 when none is (tiny samples)."""
    if n == 0 or m == 0 or ks_pvalue(1.0, n, m) > alpha:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(40 if n * m <= EXACT_MAX_PRODUCT else 60):  # the exact p-value costs O(n·m): fewer steps
        middle = (low + high) / 2
        if ks_pvalue(middle, n, m) <= alpha:
            high = middle
        else:
            low = middle
    return high


def kolmogorov_sf(x: float) -> float:
    """P(K > x) for the Kolmogorov distribution: 2 Σ (−1)^(k−1) exp(−2k²x²) (scipy's `kstwobign.sf`; written
    out because importing scipy.stats costs more than a whole KS pass over 128 features)."""
    if x <= 0.2:
        return 1.0  # the series converges slowly here, and the survival function is 1 to 12 digits
    k = np.arange(1, 101)
    return float(min(1.0, max(0.0, 2.0 * np.sum((-1.0) ** (k - 1) * np.exp(-2.0 * k**2 * x * x)))))


def _exact_pvalue(d: float, n: int, m: int) -> float:
    """1 − (paths from (0,0) to (n,m) that keep |i/n − j/m| < d) / C(n+m, n), in probability form."""
    # Each path is a random interleaving; step probabilities keep the numbers in [0, 1] (no overflow).
    tol = 1e-12  # d arrives from floating-point CDF differences: be lenient on the boundary
    inside = np.zeros(m + 1)
    for i in range(n + 1):
        row = np.zeros(m + 1)
        for j in range(m + 1):
            if abs(i / n - j / m) >= d - tol:
                continue
            if i == 0 and j == 0:
                row[j] = 1.0
                continue
            from_up = inside[j] * ((n - i + 1) / (n + m - i - j + 1)) if i > 0 else 0.0
            from_left = row[j - 1] * ((m - j + 1) / (n + m - i - j + 1)) if j > 0 else 0.0
            row[j] = from_up + from_left
        inside = row
    return float(min(1.0, max(0.0, 1.0 - inside[m])))


def chi_square(ref_counts: np.ndarray, cur_counts: np.ndarray) -> tuple[float, float, float]:
    """Chi-square test of homogeneity on category counts: (statistic, p-value, Cramér's V)."""
    from scipy.special import chdtrc  # the chi-square survival function, without scipy.stats' import cost

    table = np.vstack([ref_counts, cur_counts]).astype(np.float64)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 0.0, 1.0, 0.0
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(np.sum((table - expected) ** 2 / expected))
    pvalue = float(chdtrc(table.shape[1] - 1, statistic))
    cramers_v = math.sqrt(statistic / (table.sum() * (min(table.shape) - 1)))
    return statistic, pvalue, cramers_v


def adjust(pvalues: npt.ArrayLike, method: Correction = "bh") -> np.ndarray:
    """Benjamini–Hochberg (false discovery rate) or Bonferroni (family-wise error) adjusted p-values."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.size == 0:
        return p
    if method == "bonferroni":
        return np.minimum(1.0, p * p.size)
    order = np.argsort(p)
    scaled = p[order] * p.size / np.arange(1, p.size + 1)
    monotone = np.minimum.accumulate(scaled[::-1])[::-1]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, monotone)
    return adjusted
