"""Ids (and category values) the reference never saw: the set it saw, kept in the profile as 64-bit hashes, and a
test for a brand-new id taking a share of tonight's rows.

**What the chi-square cannot see.** An id feature keeps its most frequent reference ids and folds every other id
into "(other)" before testing; a never-seen id taking 2 % of tonight's rows lands in "(other)" beside thousands of
rare ids and moves nothing (caught 0–3 % of the time with 10k–100k ids). So the profile keeps the set of every value
the reference held, and tonight's values are checked against it *before* any folding.

**The test.** Under no drift the reference and tonight's rows are exchangeable. Given the pooled count t of a
value over both sides (n reference and m current values), the chance that all t fell on tonight's side is
C(m, t)/C(n + m, t) (hypergeometric, as in Fisher's exact test), which only falls as t grows. At most
(n + m)/c values have a pooled count ≥ c, so the chance that *any* value with c or more occurrences is absent from
the reference is at most ((n + m)/c) · C(m, c)/C(n + m, c): the p-value of the largest new value's count c. It
needs no count of the reference's values, only the set, and it is valid given every pooled count (a union bound,
conservative). A value repeated inside one row (a token in a sequence) is counted per row: c is its count divided
by the positions per row, rounded up.

**Large cardinality.** The set holds up to `SEEN_CAP` hashes; beyond, the smallest `SEEN_CAP` (a bottom-k sample
of the values by hash, the same on every side): only values whose hash falls at or below the largest kept one are
checked. A new value then goes unseen with probability 1 − (kept / distinct values), and the verdict says so.

Also reported: the share of tonight's values the reference never saw, beside the reference's own Good–Turing
estimate of its unseen mass (singletons / values): how much of tonight is new, for reading, not a decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

SEEN_CAP = 1 << 20  # hashes kept per feature (8 MiB); beyond, a bottom-k sample of the values
FULL = np.iinfo(np.uint64).max


def hashes(values: list[str]) -> np.ndarray:
    """64-bit hashes of the values as the drift tables key them (strings), the same in every process."""
    import pandas as pd

    if not values:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(np.asarray(values, dtype=object), categorize=False).astype(np.uint64)


@dataclass(frozen=True)
class SeenValues:
    """The values one reference feature held: their sorted hashes (all, or the `SEEN_CAP` smallest), the largest
    hash checked (`limit`), and the reference's values, distinct values and singletons behind them."""

    hashes: np.ndarray
    limit: int
    values: int
    distinct: int
    singletons: int

    @classmethod
    def of(cls, counts: Mapping[str, int], *, cap: int = SEEN_CAP) -> SeenValues:
        keys = list(counts)
        hashed = np.unique(hashes(keys))
        limit = int(FULL) if len(hashed) <= cap else int(hashed[cap - 1])
        return cls(hashes=hashed[:cap], limit=limit, values=int(sum(counts.values())), distinct=len(keys),
                   singletons=sum(1 for c in counts.values() if c == 1))

    @property
    def sampled(self) -> float:
        """The share of the reference's distinct values whose hash is kept (1 when all are)."""
        return 1.0 if self.limit == int(FULL) else len(self.hashes) / max(self.distinct, 1)


@dataclass(frozen=True)
class NewValues:
    """Tonight's values the reference never saw (among those checked), most frequent first."""

    top: list[tuple[str, int]]  # (value, count), the 20 most frequent
    share: float  # of tonight's checked values
    largest: int  # count of the most frequent new value, per row
    pvalue: float
    checked_share: float  # share of the reference's distinct values the check covers
    good_turing: float  # the reference's own estimate of its unseen mass


def new_values(seen: SeenValues, current: Mapping[str, int], *, per_row: int = 1) -> NewValues:
    """Tonight's `current` counts against the values `seen`; `per_row`: values per row (an N-D id array)."""
    keys = list(current)
    counts = np.array([current[k] for k in keys], dtype=np.int64)
    hashed = hashes(keys)
    checked = hashed <= np.uint64(seen.limit)
    new = checked & ~np.isin(hashed, seen.hashes)
    order = np.argsort(-counts[new], kind="stable")
    new_keys = [keys[i] for i in np.flatnonzero(new)[order]]
    new_counts = counts[new][order]
    total_checked = int(counts[checked].sum())
    largest = int(new_counts[0]) if len(new_counts) else 0
    per = max(per_row, 1)
    return NewValues(
        top=[(k, int(c)) for k, c in zip(new_keys[:20], new_counts[:20], strict=False)],
        share=float(new_counts.sum()) / total_checked if total_checked else 0.0,
        largest=largest,
        pvalue=pvalue(math.ceil(largest / per), reference=seen.values // per, current=int(counts.sum()) // per),
        checked_share=seen.sampled,
        good_turing=seen.singletons / seen.values if seen.values else 0.0)


def pvalue(largest: int, *, reference: int, current: int) -> float:
    """P(some value with `largest` or more occurrences over both sides has them all on the current side), bounded
    by ((n + m)/c) · C(m, c)/C(n + m, c); 1 when nothing is new."""
    n, m, c = reference, current, largest
    if c <= 0 or m <= 0:
        return 1.0
    if c > m:
        c = m
    log_ratio = (math.lgamma(m + 1) - math.lgamma(m - c + 1)) - (math.lgamma(n + m + 1) - math.lgamma(n + m - c + 1))
    return float(min(1.0, math.exp(math.log((n + m) / c) + log_ratio)))
