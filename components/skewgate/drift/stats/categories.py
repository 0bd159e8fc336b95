"""Categories and ids: which ids a reference profile keeps, and the chi-square test of homogeneity that stays at
its level when the table is wide and sparse.

**Kept ids are chosen on rows that are not tested.** An id feature keeps its `keep` most frequent ids and
counts the rest together as "(other)". Choosing them from the counts that are then tested is biased: an id near
the cut is kept because its reference count ran high, so every current sample looks short on it (with 5,000
Zipf ids and 5,000 rows a side, 100 % of same-distribution pairs alarm). So the reference rows are split by a
seeded hash of (file, row index) — a fixed share `selection_share` of them ranks the ids, the other rows are
counted and tested. Under no drift the kept set is independent of the tested counts, so the table is an
ordinary table of fixed cells. The split is used only when there are more ids than `keep`; otherwise every id is
kept and every row is counted. A row index, not the row's content, is hashed: duplicate rows (an id-only table)
fall on both sides like any others, and the split does not depend on how the file is read in batches.

**Rare cells are pooled by their pooled counts.** Pearson's X² is chi-square distributed when every cell
expects a few values on both sides; sparse cells with unequal sample sizes inflate its variance by about
(N/n + N/m − 4)·Σ 1/pooled count, so a nightly snapshot against a large reference would alarm by itself.
Cells whose expected count on the smaller side is below `min_expected` are pooled into one "(rare)" cell
(kept apart from "(other)", so that a current sample that avoids the kept ids still shows). The choice uses
only the pooled (reference + current) count of each cell, which the null hypothesis does not move: given the
pooled counts, how they divide between the two sides is the same hypergeometric law whichever cells were pooled
(the conditional argument behind Fisher's exact test), so the pooled table is tested at its level.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Mapping

import numpy as np

from skewgate.drift.stats import ks

OTHER = "(other)"  # ids outside the kept ones
RARE = "(rare)"  # cells too rare to test alone, pooled
SELECTION_SHARE = 0.25  # share of the reference rows that rank the ids (the rest are counted and tested)
MIN_EXPECTED = 5.0  # expected count on the smaller side below which a cell is pooled (Cochran's rule)

_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def selection_rows(seed: int, origin: str, start: int, rows: int, share: float = SELECTION_SHARE) -> np.ndarray:
    """True for the rows `start … start + rows − 1` of file `origin` that rank the ids: a splitmix64 hash of
    (seed, file, row index), so the split does not depend on the batches a file is read in."""
    key = np.uint64(((seed & 0xFFFFFFFF) << 32) | zlib.crc32(origin.encode()))
    with np.errstate(over="ignore"):
        x = np.arange(start, start + rows, dtype=np.uint64) + key * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * _MIX[0]
        x = (x ^ (x >> np.uint64(27))) * _MIX[1]
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)) < share


def kept_categories(tested: Mapping[str, Mapping[str, int]], selection: Mapping[str, Mapping[str, int]],
                    ids: Collection[str], keep: int) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """(categories, split): the profile's counts per categorical feature and, per id feature that was cut,
    the rows that chose its ids and the rows it counts. `tested`/`selection`: the counts of an id feature in the
    tested rows and in the ranking rows (features without a selection share count every row in `tested`).

    An id feature with at most `keep` ids keeps them all, counted over every row. Otherwise it keeps the `keep`
    ids most frequent in the ranking rows (ties by id), with their counts in the tested rows (0 included), and
    "(other)" counts the tested rows' other ids."""
    categories: dict[str, dict[str, int]] = {}
    split: dict[str, dict[str, int]] = {}
    for name, counts in tested.items():
        if name not in ids or name not in selection:
            categories[name] = dict(counts)
            continue
        ranking = selection[name]
        everything = dict(counts)
        for key, c in ranking.items():
            everything[key] = everything.get(key, 0) + c
        if len(everything) <= keep:
            categories[name] = everything
            continue
        chosen = [k for k, _ in sorted(ranking.items(), key=lambda kv: (-kv[1], kv[0]))[:keep]]
        kept = {k: int(counts.get(k, 0)) for k in chosen}
        total = sum(counts.values())
        categories[name] = kept | {OTHER: total - sum(kept.values())}
        split[name] = {"ranking_values": sum(ranking.values()), "tested_values": total, "kept": len(kept)}
    return categories, split


def fold_current(reference: Mapping[str, int], current: Mapping[str, int]) -> dict[str, int]:
    """An id feature cut to its kept ids ("(other)" in the reference): current ids outside them count as
    "(other)"."""
    if OTHER not in reference:
        return dict(current)
    folded = {k: c for k, c in current.items() if k in reference}
    return folded | {OTHER: folded.get(OTHER, 0) + sum(c for k, c in current.items() if k not in reference)}


def homogeneity(reference: Mapping[str, int], current: Mapping[str, int], *,
                min_expected: float = MIN_EXPECTED) -> tuple[float, float, float, int]:
    """(statistic, p-value, Cramér's V, cells): chi-square of the 2 × k table after pooling the cells that
    expect fewer than `min_expected` values on the smaller side (by their pooled counts; "(other)" stays its
    own cell)."""
    keys = sorted(set(reference) | set(current))
    ref = np.array([reference.get(k, 0) for k in keys], dtype=np.float64)
    cur = np.array([current.get(k, 0) for k in keys], dtype=np.float64)
    n, m = ref.sum(), cur.sum()
    if n == 0 or m == 0:
        return 0.0, 1.0, 0.0, int(np.count_nonzero(ref + cur))
    expected = min(n, m) * (ref + cur) / (n + m)
    rare = (expected < min_expected) & np.array([k != OTHER for k in keys], dtype=bool)
    if rare.any():
        ref = np.append(ref[~rare], ref[rare].sum())
        cur = np.append(cur[~rare], cur[rare].sum())
    statistic, pvalue, cramers_v = ks.chi_square(ref, cur)
    return statistic, pvalue, cramers_v, int(np.count_nonzero(ref + cur))


def smallest_v(cells: int, total: float, *, alpha: float, floor: float) -> float | None:
    """The smallest Cramér's V a 2 × `cells` table over `total` values could flag at level `alpha` with the
    effect floor `floor` (None when the table cannot be tested: fewer than two cells)."""
    from scipy.special import chdtri  # the chi-square inverse survival function

    if cells < 2 or total <= 0:
        return None
    return max(floor, math.sqrt(float(chdtri(cells - 1, alpha)) / total))
