"""A mergeable quantile sketch with a deterministic, recorded error bound, and the KS statistic between two.

A sketch keeps some of a column's values (always its minimum and maximum) with bounds on their ranks:
`lower[k] ≤ #{x ≤ values[k]} ≤ upper[k]`. While every value is kept (`exact`, `lower` is None) value k has rank
k + 1 and nothing is approximate. Merging two sketches adds their rank bounds (a value of one sketch falls
between two stored values of the other, whose bounds enclose its rank there); compressing keeps evenly spaced
values and so widens the gaps between them. `SketchBuilder` merges chunks like a binary counter — sketches of
equal weight only — so the relative width grows by about 1/(2·capacity) per level, not per chunk.

The KS statistic from two sketches is evaluated on every cell between consecutive stored values of either;
inside a cell each CDF lies in a known interval, so the statistic is within `error` (returned, not assumed) of
the exact one, and at least `least` (`ks_bounds`): what a p-value that holds whatever the sketches hide is
computed from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DEFAULT_CAPACITY = 4096


@dataclass(frozen=True)
class QuantileSketch:
    values: np.ndarray  # sorted; raw (lower None): every finite value, duplicates kept; else distinct values
    lower: np.ndarray | None  # int64 bounds on #{x ≤ values[k]}; None when raw
    upper: np.ndarray | None
    n: int
    complete: bool = False  # every distinct value is stored with its exact count (lower == upper)

    @classmethod
    def of(cls, column: npt.ArrayLike, *, presorted: bool = False) -> QuantileSketch:
        """The exact sketch of the finite values of `column`."""
        array = np.asarray(column)
        values = array if array.dtype in (np.float32, np.float64) else array.astype(np.float64)
        values = values[np.isfinite(values)]
        if not presorted:
            values = np.sort(values)
        return cls(values=values, lower=None, upper=None, n=int(values.size))

    @property
    def exact(self) -> bool:
        return self.lower is None or self.complete

    def _bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(distinct values, lower, upper) — for an exact sketch the counts make both bounds exact."""
        if self.lower is not None and self.upper is not None:
            return self.values, self.lower, self.upper
        # values are sorted: the last of each run of equal values has rank (index + 1); no second sort
        last = np.flatnonzero(np.append(self.values[1:] != self.values[:-1], True)) if self.n else np.zeros(0, int)
        ranks = (last + 1).astype(np.int64)
        return self.values[last].astype(np.float64), ranks, ranks

    def cell_bounds(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on #{x ≤ t} valid for every t from `points[i]` up to (not including) the next stored value."""
        if self.n == 0:
            zero = np.zeros(len(points), dtype=np.int64)
            return zero, zero
        index = np.searchsorted(self.values, points, side="right")
        if self.lower is None or self.upper is None:
            return index.astype(np.int64), index.astype(np.int64)
        if self.complete:
            below = np.where(index > 0, self.lower[np.maximum(index - 1, 0)], 0)
            return below, below
        below = np.where(index > 0, self.lower[np.maximum(index - 1, 0)], 0)
        above = np.where(index < len(self.values), self.upper[np.minimum(index, len(self.values) - 1)] - 1, self.n)
        above = np.where(index > 0, above, 0)  # values[0] is the true minimum: nothing lies below it
        return below, np.maximum(above, below)

    @property
    def error_bound(self) -> float:
        """Largest half-width of the CDF interval over all cells: the error of the midpoint CDF."""
        if self.exact or self.n == 0:
            return 0.0
        below, above = self.cell_bounds(self.values)
        return float(np.max(above - below)) / (2 * self.n)

    def merge(self, other: QuantileSketch) -> QuantileSketch:
        """The sketch of both columns together (not compressed)."""
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        if self.lower is None and other.lower is None:
            return QuantileSketch(values=np.sort(np.concatenate([self.values, other.values])), lower=None,
                                  upper=None, n=self.n + other.n)
        values = np.union1d(self._bounds()[0], other._bounds()[0])
        low_a, high_a = self._point_bounds(values)
        low_b, high_b = other._point_bounds(values)
        if self.exact and other.exact:
            return QuantileSketch(values=values, lower=low_a + low_b, upper=low_a + low_b, n=self.n + other.n,
                                  complete=True)
        return _tightened(values, low_a + low_b, high_a + high_b, self.n + other.n)

    def _point_bounds(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on #{x ≤ t} at exactly t = points[i]."""
        values, lower, upper = self._bounds()
        index = np.searchsorted(values, points, side="right")
        below = np.where(index > 0, lower[np.maximum(index - 1, 0)], 0)
        if self.exact:
            return below, below
        stored = (index > 0) & (values[np.maximum(index - 1, 0)] == points)
        nxt = np.where(index < len(values), upper[np.minimum(index, len(values) - 1)] - 1, self.n)
        above = np.where(stored, upper[np.maximum(index - 1, 0)], np.where(index > 0, nxt, 0))
        return below, np.maximum(above, below)

    def compress(self, capacity: int) -> QuantileSketch:
        """Keep about `capacity` values, evenly spaced in rank, always the minimum and the maximum."""
        values, lower, upper = self._bounds()
        if len(values) <= capacity:
            if self.lower is not None:
                return self
            return QuantileSketch(values=values, lower=lower, upper=upper, n=self.n, complete=True)
        middle = (lower + upper) / 2.0
        targets = np.linspace(middle[0], middle[-1], max(capacity, 2))
        # ascending already (targets and middle both are): drop repeats in one pass, not a sort as np.unique does
        index = np.concatenate([[0], np.clip(np.searchsorted(middle, targets), 0, len(values) - 1),
                                [len(values) - 1]])
        keep = index[np.append(True, index[1:] != index[:-1])]
        return _tightened(values[keep], lower[keep], upper[keep], self.n)

    def quantiles(self, levels: npt.ArrayLike) -> np.ndarray:
        """Approximate quantiles (the stored value nearest in middle rank); NaN when empty."""
        levels = np.asarray(levels, dtype=np.float64)
        if self.n == 0:
            return np.full(levels.shape, np.nan)
        if self.lower is None:  # every value, sorted: numpy's "linear" quantile read off the order statistics
            position = levels * (self.n - 1)  # (np.quantile copies and partitions the whole column first)
            below = np.floor(position).astype(np.int64)
            low = self.values[below].astype(np.float64)
            high = self.values[np.minimum(below + 1, self.n - 1)].astype(np.float64)
            return low + (high - low) * (position - below)
        values, lower, upper = self._bounds()
        middle = (lower + upper) / 2.0 / self.n
        index = np.clip(np.searchsorted(middle, levels), 0, len(values) - 1)
        out = values[index]
        out[levels <= 0] = values[0]
        out[levels >= 1] = values[-1]
        return out


def _tightened(values: np.ndarray, lower: np.ndarray, upper: np.ndarray, n: int) -> QuantileSketch:
    """Use what distinct stored values imply: each holds at least one more value than the one before it, the
    maximum holds all n."""
    k = np.arange(len(values), dtype=np.int64)
    lower = np.maximum.accumulate(np.maximum(lower, 1) - k) + k
    upper = (np.minimum.accumulate((np.minimum(upper, n) - k)[::-1])[::-1]) + k
    lower[-1] = upper[-1] = n
    return QuantileSketch(values=values.astype(np.float64), lower=lower.astype(np.int64),
                          upper=np.maximum(upper, lower).astype(np.int64), n=n)


def ks_between(reference: QuantileSketch, current: QuantileSketch) -> tuple[float, float]:
    """(D, error): the KS statistic from the midpoints of both CDF intervals, and how far the exact statistic
    can be from it. Exact sketches on both sides give error 0 and the textbook statistic."""
    d, error, _ = ks_bounds(reference, current)
    return d, error


def ks_bounds(reference: QuantileSketch, current: QuantileSketch) -> tuple[float, float, float]:
    """(D, error, least): `ks_between`'s two, and the least value the exact statistic can have — the largest,
    over cells, of the midpoint difference less that cell's own widths (never below D − error, often above: a
    cell where the CDFs are far apart may be a narrow one)."""
    if reference.n == 0 or current.n == 0:
        return float("nan"), 0.0, float("nan")
    if reference.lower is None and current.lower is None:
        d = _ks_raw(reference.values, current.values)
        return d, 0.0, d
    # sorted needles keep searchsorted in cache; both halves are sorted runs, which a stable sort merges
    points = np.sort(np.concatenate([reference.values, current.values]), kind="stable")
    ref_low, ref_high = reference.cell_bounds(points)
    cur_low, cur_high = current.cell_bounds(points)
    ref_mid, ref_half = (ref_low + ref_high) / (2.0 * reference.n), (ref_high - ref_low) / (2.0 * reference.n)
    cur_mid, cur_half = (cur_low + cur_high) / (2.0 * current.n), (cur_high - cur_low) / (2.0 * current.n)
    gap, width = np.abs(ref_mid - cur_mid), ref_half + cur_half
    return float(np.max(gap)), float(np.max(width)), max(float(np.max(gap - width)), 0.0)


def _ks_raw(a: np.ndarray, b: np.ndarray) -> float:
    """Both sides whole and sorted: one stable merge, then both ECDFs after each run of equal values."""
    pooled = np.concatenate([a, b])
    order = np.argsort(pooled, kind="stable")  # two sorted runs: a merge, not a sort
    from_a = np.cumsum(order < a.size)
    from_b = np.arange(1, pooled.size + 1) - from_a
    ordered = pooled[order]
    last = np.append(ordered[1:] != ordered[:-1], True)
    return float(np.max(np.abs(from_a[last] / a.size - from_b[last] / b.size)))


class SketchBuilder:
    """Streams one column into a sketch: every value while at most `exact_rows` arrive, then chunk sketches
    merged like a binary counter (one sketch per level, each twice the weight of the one below)."""

    def __init__(self, *, capacity: int = DEFAULT_CAPACITY, exact_rows: int) -> None:
        self.capacity = capacity
        self.exact_rows = exact_rows
        self._exact: list[np.ndarray] | None = []
        self._exact_n = 0
        self._levels: list[QuantileSketch | None] = []

    def add(self, values: np.ndarray, *, presorted: bool = False) -> None:
        """`values`: finite values of one chunk."""
        values = values if presorted else np.sort(values)
        if values.size == 0:
            return
        if self._exact is not None:
            # kept as given, not copied: a fresh sort (here, or the accumulator's sorted batch, which nothing
            # writes to), so a view holds no more than a copy would
            self._exact.append(values)
            self._exact_n += values.size
            if self._exact_n <= self.exact_rows:
                return
            pending, self._exact = self._exact, None
            for chunk in pending:
                self._carry(QuantileSketch.of(chunk, presorted=True).compress(self.capacity))
            return
        self._carry(QuantileSketch.of(values, presorted=True).compress(self.capacity))

    def _carry(self, sketch: QuantileSketch) -> None:
        level = 0
        while level < len(self._levels) and self._levels[level] is not None:
            held = self._levels[level]
            assert held is not None
            sketch = held.merge(sketch).compress(self.capacity)
            self._levels[level] = None
            level += 1
        if level == len(self._levels):
            self._levels.append(None)
        self._levels[level] = sketch

    def result(self) -> QuantileSketch:
        if self._exact is not None:
            # sorted chunks, merged by numpy's default (SIMD) sort: 4x a stable sort's speed, and equal values
            # cannot be told apart, so stability buys nothing here
            values = np.sort(np.concatenate(self._exact)) if self._exact else np.zeros(0, np.float64)
            self._exact = [values]
            return QuantileSketch(values=values, lower=None, upper=None, n=int(values.size))
        total = QuantileSketch.of(np.zeros(0))
        for sketch in self._levels:
            if sketch is not None:
                total = total.merge(sketch).compress(self.capacity)
        return total


def merge_sketches(a: QuantileSketch, b: QuantileSketch, *, capacity: int, exact_rows: int) -> QuantileSketch:
    """Merge partial results: exact while the union fits in `exact_rows`, else compressed."""
    merged = a.merge(b)
    return merged if merged.exact and merged.n <= exact_rows else merged.compress(capacity)
