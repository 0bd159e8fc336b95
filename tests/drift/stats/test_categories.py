"""Ids and categories: the kept ids are ranked on reference rows that are not tested, rare cells are pooled by
their pooled counts, so unchanged data alarms at the nominal rate however many ids there are — and a shift
among the frequent ids still shows."""

import math
from collections import Counter

import numpy as np
import pytest

from skewgate.drift.stats.categories import (
    OTHER,
    RARE,
    fold_current,
    homogeneity,
    kept_categories,
    selection_rows,
    smallest_v,
)
from skewgate.drift.stats.source import Batch
from skewgate.drift.stats.stream import Accumulator

ALPHA = 0.05
REPS = 100
KEEP = 1000


def _zipf(ids):
    p = 1.0 / np.arange(1, ids + 1)
    return p / p.sum()


def _profile_counts(ref_ids, *, keep=KEEP, batch_rows=4096, ranked_on_tested=False):
    """What `make_profile` keeps of an id column read in batches (through the same accumulator)."""
    acc = Accumulator((), (), ("tok",), seed=0, exact_rows=0, capacity=64, split_ids=("tok",))
    for start in range(0, len(ref_ids), batch_rows):
        chunk = ref_ids[start:start + batch_rows]
        acc.add(Batch(origin="ref.npz", numeric=np.zeros((len(chunk), 0), np.float32), categorical={"tok": chunk}))
    side = acc.result()
    if ranked_on_tested:  # the old way: rank every row's ids and test those very counts
        counts = Counter(side.categories["tok"]) + Counter(side.id_selection["tok"])
        ranked = counts.most_common()
        return dict(ranked[:keep]) | ({OTHER: sum(c for _, c in ranked[keep:])} if len(ranked) > keep else {})
    return kept_categories(side.categories, side.id_selection, {"tok"}, keep)[0]["tok"]


def _counts(ids):
    values, counts = np.unique(ids, return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts, strict=True)}


def _test(reference, cur_ids):
    return homogeneity(reference, fold_current(reference, _counts(cur_ids)))


def _draw(rng, ids, rows, p):
    return rng.choice(ids, size=rows, p=p) if p is not None else rng.integers(0, ids, rows)


@pytest.mark.parametrize(("ids", "zipf", "n", "m"), [
    pytest.param(10, False, 5_000, 5_000, id="10-uniform"),
    pytest.param(3_000, False, 20_000, 20_000, id="3000-uniform-20k"),
    pytest.param(5_000, True, 5_000, 5_000, id="5000-zipf-5k"),
    pytest.param(5_000, True, 50_000, 5_000, id="5000-zipf-50k-reference-5k-current"),
    pytest.param(1_000_000, False, 20_000, 20_000, id="1M-uniform-20k"),
])
def test_unchanged_ids_alarm_at_the_nominal_rate(ids, zipf, n, m):
    """Same distribution on both sides, `REPS` pairs: the share of p < α stays within 3 standard errors of α
    (before: 100 % for the wide ones, because the kept ids were ranked on the tested counts)."""
    p = _zipf(ids) if zipf else None
    alarms = 0
    for rep in range(REPS):
        rng = np.random.default_rng(rep)
        reference = _profile_counts(_draw(rng, ids, n, p))
        alarms += _test(reference, _draw(rng, ids, m, p))[1] < ALPHA
    assert alarms / REPS <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPS)


def test_ranking_ids_on_the_tested_counts_cries_wolf():
    """The defect the split removes, measured by the same harness: it has teeth."""
    p, alarms = _zipf(5_000), 0
    for rep in range(20):
        rng = np.random.default_rng(rep)
        reference = _profile_counts(_draw(rng, 5_000, 5_000, p), ranked_on_tested=True)
        alarms += _test(reference, _draw(rng, 5_000, 5_000, p))[1] < ALPHA
    assert alarms >= 15


def test_a_share_shift_among_frequent_ids_is_still_found():
    """Zipf over 5,000 ids, 5,000 rows a side; the current moves 30 % of the top id's share (3.3 % of the rows)
    to the fourth id: found in nearly every pair, with an effect above the default floor — where a plain
    chi-square over every id, drowned in sparse cells, rarely sees it."""
    from scipy.stats import chi2_contingency

    p = _zipf(5_000)
    shifted = p.copy()
    shifted[0] -= 0.3 * p[0]
    shifted[3] += 0.3 * p[0]
    found = plain = 0
    for rep in range(20):
        rng = np.random.default_rng(100 + rep)
        ref_ids, cur_ids = _draw(rng, 5_000, 5_000, p), _draw(rng, 5_000, 5_000, shifted)
        _, pvalue, v, _ = _test(_profile_counts(ref_ids), cur_ids)
        found += pvalue < ALPHA and v >= 0.05
        ref, cur = _counts(ref_ids), _counts(cur_ids)
        keys = sorted(set(ref) | set(cur))
        plain += chi2_contingency([[ref.get(k, 0) for k in keys], [cur.get(k, 0) for k in keys]])[1] < ALPHA
    assert found >= 18 and plain <= 10


def test_the_split_is_seeded_by_file_and_row_not_by_batches():
    whole = selection_rows(0, "part-0.parquet", 0, 10_000)
    pieces = np.concatenate([selection_rows(0, "part-0.parquet", s, n) for s, n in ((0, 257), (257, 9_743))])
    np.testing.assert_array_equal(whole, pieces)
    assert abs(whole.mean() - 0.25) < 0.02
    assert not np.array_equal(whole, selection_rows(0, "part-1.parquet", 0, 10_000))
    assert not np.array_equal(whole, selection_rows(1, "part-0.parquet", 0, 10_000))
    ids = np.random.default_rng(0).choice(5_000, 20_000, p=_zipf(5_000))
    assert _profile_counts(ids, batch_rows=333) == _profile_counts(ids, batch_rows=8_192)


def test_kept_ids_come_from_the_ranking_rows_and_every_id_is_kept_when_few():
    tested = {"tok": {"a": 5, "b": 1, "c": 9}, "color": {"red": 3}}
    ranking = {"tok": {"b": 4, "a": 2, "d": 1}}
    cut, split = kept_categories(tested, ranking, {"tok"}, 2)
    assert cut == {"tok": {"b": 1, "a": 5, OTHER: 9}, "color": {"red": 3}}  # ranked on b, a; c is only tested
    assert split == {"tok": {"ranking_values": 7, "tested_values": 15, "kept": 2}}
    whole, split = kept_categories(tested, ranking, {"tok"}, 4)
    assert whole["tok"] == {"a": 7, "b": 5, "c": 9, "d": 1} and split == {}  # all kept: every row counts


def test_rare_cells_are_pooled_apart_from_other():
    reference = {"a": 500, "b": 480, "r1": 2, "r2": 1, OTHER: 30}
    current = {"a": 490, "b": 500, "r1": 1, "new": 2, OTHER: 25}
    stat, _, _, cells = homogeneity(reference, current)
    assert cells == 4  # a, b, (other), and r1 + r2 + new pooled
    pooled = homogeneity({"a": 500, "b": 480, RARE: 3, OTHER: 30}, {"a": 490, "b": 500, RARE: 3, OTHER: 25})
    assert stat == pytest.approx(pooled[0])
    # a current sample that avoids every kept id: each alone is too rare, but their pool is not
    kept = {str(k): 7 for k in range(100)} | {OTHER: 2_300}
    assert homogeneity(kept, fold_current(kept, {str(k): 7 for k in range(100, 400)}))[2] > 0.3


def test_smallest_detectable_cramers_v():
    assert smallest_v(2, 10_000, alpha=0.05, floor=0.0) == pytest.approx(math.sqrt(3.841 / 10_000), rel=1e-3)
    assert smallest_v(2, 10_000_000, alpha=0.05, floor=0.05) == 0.05
    assert smallest_v(1, 100, alpha=0.05, floor=0.05) is None
