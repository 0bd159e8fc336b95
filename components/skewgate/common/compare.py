"""Closeness in `torch.testing.assert_close` semantics: `|a − e| ≤ atol + rtol·|e|`, elementwise.

Defaults per dtype are torch's; integers and booleans must match exactly. Kept numpy-only so any runtime's
outputs can be compared without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# (rtol, atol) by dtype, as in torch.testing.assert_close.
_DEFAULTS: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    @classmethod
    def for_dtype(cls, dtype: npt.DTypeLike) -> Tolerance:
        """torch's default tolerance for `dtype`; exact (0, 0) for integer and boolean dtypes."""
        rtol, atol = _DEFAULTS.get(np.dtype(dtype).name, (0.0, 0.0))
        return cls(rtol=rtol, atol=atol)

    @classmethod
    def parse(cls, text: str) -> Tolerance:
        """`"RTOL,ATOL"`, for example `"1e-4,1e-5"`."""
        rtol, atol = (float(part) for part in text.split(","))
        return cls(rtol=rtol, atol=atol)


@dataclass(frozen=True)
class Closeness:
    """How far `actual` is from `expected`. `worst_ratio` ≤ 1 means within tolerance everywhere."""

    max_abs: float
    mean_abs: float
    max_rel: float
    worst_ratio: float
    mismatched: int
    total: int
    first_mismatch: tuple[int, ...] | None
    shape_mismatch: str | None = None

    @property
    def ok(self) -> bool:
        return self.shape_mismatch is None and self.mismatched == 0

    def describe(self) -> str:
        if self.shape_mismatch:
            return self.shape_mismatch
        text = (f"max |a-e| {self.max_abs:.3g}, mean {self.mean_abs:.3g}, max rel {self.max_rel:.3g}; "
                f"{self.mismatched}/{self.total} out of tolerance")
        if self.first_mismatch is not None:
            text += f", first at index {list(self.first_mismatch)}"
        return text


def compare_close(actual: npt.ArrayLike, expected: npt.ArrayLike, tolerance: Tolerance) -> Closeness:
    """Compare elementwise. NaN equals NaN only where both sides have it (as `equal_nan=True`), an infinity
    equals itself, and any other infinite difference is out of tolerance."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        return Closeness(np.inf, np.inf, np.inf, np.inf, max(a.size, e.size), max(a.size, e.size), None,
                         shape_mismatch=f"shape {a.shape} != expected {e.shape}")
    diff, bad, ratio, rel = _elementwise(a, e, tolerance)
    assert rel is not None  # asked for: relative=True
    total = int(a.size)
    first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape)) if bad.any() else None
    return Closeness(
        max_abs=float(diff.max()) if total else 0.0,
        mean_abs=float(diff.mean()) if total else 0.0,
        max_rel=float(rel.max()) if total else 0.0,
        worst_ratio=float(ratio.max()) if total else 0.0,
        mismatched=int(bad.sum()),
        total=total,
        first_mismatch=first,
    )


@dataclass(frozen=True)
class ClosenessAlong:
    """`compare_close` per index of one axis, in one vectorised pass: arrays indexed along that axis."""

    max_abs: np.ndarray
    worst_ratio: np.ndarray
    mismatched: np.ndarray

    @property
    def ok(self) -> np.ndarray:
        return self.mismatched == 0


# compare_along's temporaries are float64 copies of a block of the arrays: at 12,288 elements (96 KiB) they stay
# under glibc's 128 KiB mmap threshold, so each block's arrays reuse freed heap memory instead of faulting in fresh
# pages. A 128 × 64 × 10 comparison took 0.42 ms in such blocks, 1.1–1.5 ms whole.
ALONG_BLOCK_ELEMENTS = 12_288


def compare_along(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance, *, axis: int) -> ClosenessAlong:
    """`compare_close(actual.take(i, axis), expected.take(i, axis))` for every `i` at once (same semantics; the
    shapes must be equal), without a Python call per index: for a comparison repeated along a time axis."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape {actual.shape} != expected {expected.shape}")
    a, e = np.moveaxis(actual, axis, 0), np.moveaxis(expected, axis, 0)
    n = a.shape[0]
    max_abs, worst_ratio, mismatched = np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
    if a.size == 0:  # nothing to compare at any index
        return ClosenessAlong(max_abs, worst_ratio, mismatched)
    rows = max(1, ALONG_BLOCK_ELEMENTS // (a.size // n))
    for start in range(0, n, rows):
        block = slice(start, start + rows)
        diff, bad, ratio, _ = _elementwise(a[block], e[block], tolerance, relative=False)
        count = diff.shape[0]
        max_abs[block] = diff.reshape(count, -1).max(axis=1)
        worst_ratio[block] = ratio.reshape(count, -1).max(axis=1)
        mismatched[block] = np.count_nonzero(bad.reshape(count, -1), axis=1)
    return ClosenessAlong(max_abs=max_abs, worst_ratio=worst_ratio, mismatched=mismatched)


def _elementwise(a: np.ndarray, e: np.ndarray, tolerance: Tolerance, *, relative: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """|a − e|, out of tolerance, |a − e| / allowed, and relative error (`relative`, else None), elementwise
    (compare_close's rules)."""
    # at least 1-d: numpy's arithmetic on 0-d arrays returns scalars, which the in-place steps cannot write to
    a64 = np.array(a, dtype=np.float64, ndmin=1)
    e64 = np.array(e, dtype=np.float64, ndmin=1)
    if np.isfinite(a).all() and np.isfinite(e).all():  # the common case, without the NaN/inf masks
        diff = np.subtract(a64, e64, out=a64)  # in place: these arrays are the size of the outputs compared
        np.abs(diff, out=diff)
        magnitude = np.abs(e64, out=e64)
        allowed = magnitude * tolerance.rtol
        allowed += tolerance.atol
        if tolerance.atol > 0:  # allowed > 0 everywhere
            ratio = diff / allowed
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(allowed > 0, diff / allowed, np.where(diff > 0, np.inf, 0.0))
        bad = diff > allowed
        if not relative:
            return diff, bad, ratio, None
        np.maximum(magnitude, np.finfo(np.float64).tiny, out=magnitude)
        return diff, bad, ratio, np.divide(diff, magnitude, out=allowed)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a64 - e64)
        both_nan = np.isnan(a64) & np.isnan(e64)
        same_inf = np.isinf(a64) & (a64 == e64)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        allowed = tolerance.atol + tolerance.rtol * np.abs(e64)
        # an infinite difference (inf against −inf, NaN or a finite value) is out of any tolerance, even the
        # infinite one an infinite expected value would allow
        far = np.isinf(diff)
        bad = (diff > allowed) | far
        ratio = np.where(allowed > 0, diff / np.where(allowed > 0, allowed, 1.0), np.where(diff > 0, np.inf, 0.0))
        ratio = np.where(far, np.inf, ratio)
        if not relative:
            return diff, bad, ratio, None
        rel = np.where(far, np.inf, diff / np.maximum(np.abs(e64), np.finfo(np.float64).tiny))
    return diff, bad, ratio, rel


def batch_sizes(n: int) -> list[int]:
    """The batch sizes a batch-invariance check uses: 1, an odd size between, and `n` (ascending, distinct)."""
    odd = max(1, (n // 2) | 1)
    return sorted({1, min(odd, n), n})
