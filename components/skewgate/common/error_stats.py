"""Error statistics that stream over batches: nothing holds all intermediates of all samples at once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from skewgate.common.compare import Tolerance

RESERVOIR = 20_000  # absolute errors kept per value for the median and p99


@dataclass
class RunningError:
    """Accumulates |a − e| statistics, the worst tolerance ratio and the SQNR of `actual` against `expected`."""

    tolerance: Tolerance
    count: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    worst_ratio: float = 0.0
    signal: float = 0.0
    noise: float = 0.0
    shape_mismatch: str | None = None
    sample: list[np.ndarray] = field(default_factory=list)
    failing: dict[int, float] = field(default_factory=dict)  # sample index → its worst ratio, where out of tolerance
    _kept: int = 0

    def update(self, actual: np.ndarray, expected: np.ndarray, rng: np.random.Generator, *,
               samples: range | None = None) -> None:
        """`samples`: the indices of the samples along axis 0 of this batch, to record which are out of
        tolerance (`failing`); a value whose axis 0 is not the batch records none."""
        if actual.shape != expected.shape:
            self.shape_mismatch = f"shape {actual.shape} vs {expected.shape}"
            return
        # float32 arithmetic, in place where it can be: this runs on every intermediate of every batch
        a = np.asarray(actual, dtype=np.float32).ravel()
        e = np.asarray(expected, dtype=np.float32).ravel()
        with np.errstate(invalid="ignore", over="ignore"):  # inf − inf: sorted out below
            diff = np.subtract(a, e)
        np.abs(diff, out=diff)
        top = float(diff.max(initial=0.0))
        if math.isnan(top):  # max propagates any NaN: a NaN on one side, or inf − inf
            # as torch.testing.assert_close: NaN equals NaN, and an infinity equals itself (−inf in an attention
            # mask is not a divergence); anything else against NaN or inf is infinitely far
            same = (np.isnan(a) & np.isnan(e)) | (a == e)
            diff = np.where(np.isnan(diff), np.where(same, 0.0, np.inf), diff).astype(np.float32)
            top = float(diff.max(initial=0.0))
        self.count += diff.size
        self.max_abs = max(self.max_abs, top)
        self.sum_abs += float(np.einsum("i->", diff))  # a plain float32 sum: 3× faster than the pairwise .sum()
        scratch = np.abs(e)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # |e| + 1e-12, not max(|e|, 1e-12): the same float32 wherever |e| > 1e-5, and a scalar maximum is
            # 10× slower than an add (it was the costliest pass here)
            rel = np.add(scratch, np.float32(1e-12))
            np.divide(diff, rel, out=rel)
            self.max_rel = max(self.max_rel, float(rel.max(initial=0.0)))
            np.multiply(scratch, self.tolerance.rtol, out=scratch)
            scratch += self.tolerance.atol
            np.divide(diff, scratch, out=scratch)  # x/0 → inf, 0/0 → nan (ignored by fmax)
            batch_worst = float(np.fmax.reduce(scratch, initial=0.0))
            self.worst_ratio = max(self.worst_ratio, batch_worst)
        if batch_worst > 1.0 and samples is not None and actual.ndim and actual.shape[0] == len(samples):
            # only on a batch out of tolerance: the common, passing batch pays nothing for it
            per_sample = np.fmax.reduce(scratch.reshape(len(samples), -1), axis=1, initial=0.0)
            for offset in np.flatnonzero(per_sample > 1.0).tolist():
                self.failing[samples[offset]] = max(self.failing.get(samples[offset], 0.0), float(per_sample[offset]))
        if math.isinf(top):  # inf against −inf, NaN, or a finite value: never within tolerance (inf/inf is NaN)
            self.max_rel = self.worst_ratio = math.inf
        self.signal += _energy(e)
        self.noise += _energy(diff)
        room = RESERVOIR - self._kept
        if room > 0 and diff.size:  # a uniform sample with replacement: enough for the median and p99
            keep = diff if diff.size <= room else diff[rng.integers(0, diff.size, room)]
            self.sample.append(keep)
            self._kept += keep.size

    @property
    def ok(self) -> bool:
        return self.shape_mismatch is None and self.count > 0 and self.worst_ratio <= 1.0

    @property
    def sqnr_db(self) -> float:
        """10·log10(signal/noise); +inf when identical."""
        if self.noise == 0:
            return math.inf
        return 10 * math.log10(max(self.signal, 1e-300) / self.noise)

    def summary(self) -> dict[str, float | str | None]:
        errors = np.concatenate(self.sample) if self.sample else np.zeros(1)
        with np.errstate(invalid="ignore"):  # inf errors (an overflowed value): inf − inf inside the percentile
            median, p99 = float(np.median(errors)), float(np.percentile(errors, 99))
        return {
            "max_abs": self.max_abs, "mean_abs": self.sum_abs / max(self.count, 1),
            "median_abs": median, "p99_abs": p99,
            "max_rel": self.max_rel, "worst_ratio": self.worst_ratio,
            "sqnr_db": None if math.isinf(self.sqnr_db) else self.sqnr_db, "shape_mismatch": self.shape_mismatch,
        }


def _energy(x: np.ndarray) -> float:
    """Σx² over the finite entries, by a float32 BLAS dot (one pass, no copy); in float64 when float32 would
    overflow, or x holds inf/NaN (a masked attention score: it carries no signal)."""
    if not x.size:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.dot(x, x))
    if math.isfinite(total):
        return total
    wide = x[np.isfinite(x)].astype(np.float64)
    return float(np.dot(wide, wide))
