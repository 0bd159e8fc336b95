"""New ids (new_ids.py): the bound behind the p-value, its level under no drift, its power on a brand-new id where
the folded chi-square is blind, the bottom-k set beyond the cap, and the gate's `new_ids` check end to end."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from skewgate.drift.core import DriftOptions, drift_gate, make_profile
from skewgate.drift.stats.new_ids import SeenValues, new_values, pvalue
from skewgate.drift.stats.profile import load_profile, save_profile


def _counts(values) -> dict[str, int]:
    keys, counts = np.unique(np.asarray(values), return_counts=True)
    return {str(k): int(c) for k, c in zip(keys, counts, strict=True)}


def test_the_bound_is_the_chance_that_a_pooled_count_falls_on_one_side():
    # n = m: each of c occurrences falls on the current side with probability about 1/2
    assert pvalue(10, reference=5000, current=5000) == pytest.approx(10000 / 10 * math.comb(5000, 10)
                                                                     / math.comb(10000, 10))
    assert pvalue(0, reference=5000, current=5000) == 1.0
    assert pvalue(1, reference=5000, current=5000) == 1.0  # a value seen once tonight is no evidence
    assert pvalue(40, reference=5000, current=5000) < pvalue(20, reference=5000, current=5000) < 1.0
    # a small current side against a large reference: far fewer repeats are needed
    assert pvalue(5, reference=200_000, current=5000) < 1e-3


@pytest.mark.parametrize(("ids", "zipf"), [(10_000, True), (100_000, False)], ids=["zipf-10k", "uniform-100k"])
def test_no_new_id_beyond_chance_under_no_drift(ids, zipf):
    """Same distribution, 30 seeded pairs of 5,000 rows: the check alarms on no more than its level allows."""
    rng = np.random.default_rng(5)
    p = 1.0 / np.arange(1, ids + 1) if zipf else np.ones(ids)
    p /= p.sum()
    alarms = 0
    for _ in range(30):
        seen = SeenValues.of(_counts(rng.choice(ids, 5000, p=p)))
        alarms += new_values(seen, _counts(rng.choice(ids, 5000, p=p))).pvalue < 0.05
    assert alarms <= 3  # level 0.05: 1.5 expected at most, the bound is conservative (0 seen)


@pytest.mark.parametrize(("ids", "zipf", "rows"), [(10_000, True, 5000), (100_000, False, 5000),
                                                   (100_000, False, 200_000)],
                         ids=["zipf-10k-5k-rows", "uniform-100k-5k-rows", "uniform-100k-200k-rows"])
def test_a_brand_new_id_taking_two_percent_is_caught(ids, zipf, rows):
    """#33 item 2: caught 3 %, 0/60 and 0/15 of the time before (folded into "(other)")."""
    rng = np.random.default_rng(9)
    p = 1.0 / np.arange(1, ids + 1) if zipf else np.ones(ids)
    p /= p.sum()
    caught = 0
    for _ in range(5):
        seen = SeenValues.of(_counts(rng.choice(ids, rows, p=p)))
        current = rng.choice(ids, rows, p=p)
        current[: rows // 50] = ids + 7  # an id the reference's range never held, on 2 % of the rows
        found = new_values(seen, _counts(current))
        caught += found.pvalue < 0.05 / 10
        assert found.top[0] == (str(ids + 7), rows // 50) and found.share >= 0.02
    assert caught == 5


@pytest.mark.parametrize(("share", "caught"), [(0.0008, False), (0.002, True)], ids=["0.08%", "0.2%"])
def test_the_decision_sits_where_the_bound_puts_it(share, caught):
    """Against 20,000 reference and 5,000 current values, a new value needs 7 occurrences (p = 0.018) to pass
    0.05 and 6 fail it (p = 0.069): 4 occurrences are not enough, 10 are."""
    seen = SeenValues.of({str(i): 4 for i in range(5000)})
    current = {str(i): 1 for i in range(5000 - round(share * 5000))} | {"brand-new": round(share * 5000)}
    assert (new_values(seen, current).pvalue < 0.05) is caught
    assert pvalue(7, reference=20_000, current=5000) < 0.05 < pvalue(6, reference=20_000, current=5000)


def test_beyond_the_cap_a_bottom_k_set_checks_a_share_of_the_values():
    counts = {str(i): 1 for i in range(10_000)}
    seen = SeenValues.of(counts, cap=1000)
    assert len(seen.hashes) == 1000 and seen.sampled == pytest.approx(0.1)
    # every reference value is either kept or above the limit: none is ever called new
    assert new_values(seen, counts).top == []
    new = {f"new-{i}": 3 for i in range(2000)}
    found = new_values(seen, new)
    assert found.share == 1.0 and len(found.top) == 20  # the checked ones (hash below the limit) are all new
    assert found.checked_share == pytest.approx(0.1)


def test_string_ids_and_a_profile_keep_the_seen_set_and_the_gate_warns(tmp_path):
    """#33 item 2: `--ids` on a string column exited 2. A brand-new product code on 2 % of tonight's rows among
    20,000 codes: the chi-square over the kept 1,000 codes sees nothing, `new_ids` warns and names it, through a
    saved profile as from the raw reference."""
    rng = np.random.default_rng(3)
    codes = np.array([f"sku-{i:05d}" for i in range(20_000)], dtype=object)
    ref = pd.DataFrame({"sku": rng.choice(codes, 5000), "f0": rng.normal(size=5000)})
    cur = pd.DataFrame({"sku": rng.choice(codes, 5000), "f0": rng.normal(size=5000)})
    cur.loc[:99, "sku"] = "sku-NEW"
    ref.to_parquet(tmp_path / "ref.parquet")
    cur.to_parquet(tmp_path / "cur.parquet")
    options = DriftOptions(ids=("sku",))
    profile = save_profile(make_profile(tmp_path / "ref.parquet", options=options), tmp_path / "ref.profile")
    assert load_profile(profile).seen["sku"].distinct == len(set(ref["sku"]))
    for reference in (tmp_path / "ref.parquet", profile):
        result = drift_gate(reference=reference, current=tmp_path / "cur.parquet", options=options)
        check = next(c for c in result.verdict.checks if c.name == "new_ids")
        assert not check.passed and check.severity == "warn" and "'sku-NEW' 100 times" in check.detail
        assert result.verdict.status == "warn"
        row = next(r for r in result.features if r["feature"] == "sku")
        assert row["new_categories"][0] == "sku-NEW" and not row["drifted"]  # the folded chi-square: blind
    healthy = drift_gate(reference=profile, current=tmp_path / "ref.parquet", options=options)
    assert next(c for c in healthy.verdict.checks if c.name == "new_ids").passed
