"""The anytime-valid nightly series (series.py): its false-alarm probability over every night against one stored
profile, its detection of a planted shift, and its state carried from night to night (file, registry tags)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.drift.cli import main
from skewgate.drift.stats import ks
from skewgate.drift.stats.series import (
    CHECK,
    SeriesOptions,
    SeriesState,
    advance,
    calibrate,
    load_state,
    night_pvalue,
    save_state,
)
from tests.drift.conftest import make_frame

ALPHA = 0.05
OPTIONS = SeriesOptions(alpha=ALPHA)


def simulate(rng, *, years, nights, n, m, shift=0.0, shift_night=None, options=OPTIONS):
    """Per year: (nights the per-night KS test alarmed, the night the series first alarmed or None); one stored
    reference of n values a year, m serving values a night, through the gate's KS and the series' seam."""
    out = []
    for _ in range(years):
        reference = ks.ReferenceECDF.exact(rng.normal(size=n))
        state, per_night = None, 0
        for night in range(1, nights + 1):
            moved = shift if shift_night is not None and night >= shift_night else 0.0
            d = ks.ks_statistic(reference, rng.normal(loc=moved, size=m))
            per_night += ks.ks_pvalue(d, n, m) < ALPHA
            p, _ = night_pvalue([{"test": "ks", "statistic": d, "effect": d, "reference_n": n, "current_n": m}],
                                delta=options.delta)
            state = advance(state, p, profile="ref", options=options)
        out.append((per_night, state.alarmed_night))
    return out


def test_the_series_bounds_any_false_alarm_over_the_nights_where_the_per_night_test_does_not():
    years = 100
    runs = simulate(np.random.default_rng(7), years=years, nights=60, n=300, m=100)
    series = sum(alarm is not None for _, alarm in runs) / years
    per_night = sum(count > 0 for count, _ in runs) / years
    assert series <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / years)
    assert per_night >= 0.7  # 60 nights at 5 % each, and an unlucky reference repeats its alarms


def test_a_planted_shift_is_detected_within_a_bounded_number_of_nights():
    runs = simulate(np.random.default_rng(11), years=20, nights=40, n=2000, m=400, shift=0.4, shift_night=20)
    alarms = [alarm for _, alarm in runs]
    assert all(alarm is not None and 20 <= alarm <= 30 for alarm in alarms), alarms


def test_the_calibrator_is_an_e_value_and_large_for_small_p():
    # E[e(U)] = 1 for U uniform: the midpoint rule on (1/N, 1), plus the tail below 1/N, ∫ dp / (p ln² p) = 1/ln N
    grid = 1 / 200_000 + (np.arange(200_000) + 0.5) / 200_000 * (1 - 1 / 200_000)
    body = np.mean([calibrate(p) for p in grid]) * (1 - 1 / 200_000)
    assert body + 1 / math.log(200_000) == pytest.approx(1.0, abs=0.01)
    assert calibrate(1.0) == 0.5 and calibrate(1e-6) > 3000
    assert calibrate(1e-6) > calibrate(1e-3) > calibrate(0.5)


def test_reference_noise_and_bonferroni_make_the_night_pvalue_conservative():
    row = {"test": "ks", "statistic": 0.1, "effect": 0.1, "reference_n": 1000, "current_n": 400}
    alone, k = night_pvalue([row], delta=0.01)
    assert k == 1 and alone > ks.kolmogorov_sf(0.1 * math.sqrt(400))  # D shrunk by the reference's own error
    pair, k = night_pvalue([row, {**row, "effect": 0.0}], delta=0.01)
    assert k == 2 and pair >= alone
    assert night_pvalue([{"test": "chi2", "statistic": 3.0, "effect": 0.2}], delta=0.01) == (1.0, 0)


def test_the_state_round_trips_through_the_file_and_a_missing_file_starts_a_new_series(tmp_path):
    path = tmp_path / "series.json"
    assert load_state(path) is None
    state = advance(None, 0.01, profile="abc", date="d1")
    assert (state.nights, state.started) == (1, "d1")
    assert state.evalue == pytest.approx(0.5 * calibrate(0.01))
    save_state(state, path)
    assert load_state(path) == state
    again = advance(load_state(path), 0.2, profile="abc", date="d2")
    assert again.nights == 2 and again.started == "d1"
    assert again.evalue == pytest.approx((state.evalue + 1 / 6) * calibrate(0.2))
    assert advance(again, 0.2, profile="another").nights == 1  # a new profile: a new series
    assert SeriesState.from_tags(again.tags()) == again
    assert SeriesState.from_tags({}) is None
    path.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(InputError):
        load_state(path)


def test_the_alarm_stays_until_a_new_profile():
    state = advance(None, 1e-9, profile="abc")
    assert state.alarmed_night == 1
    for _ in range(30):
        state = advance(state, 1.0, profile="abc")
    assert state.alarmed_night == 1 and state.evalue < SeriesOptions().threshold
    assert advance(state, 1.0, profile="new").alarmed_night is None


def test_the_cli_reports_tonight_and_the_series_and_carries_the_state(tmp_path, write):
    reference = write("reference", make_frame(600, seed=1))
    state_file = tmp_path / "state" / "series.json"
    for night in (1, 2):
        current = write(f"night{night}", make_frame(600, seed=10 + night))
        report = tmp_path / f"night{night}.json"
        code = main(["--reference", str(reference), "--current", str(current), "--report", str(report),
                     "--series-state", str(state_file)])
        assert code == 0
        verdict = json.loads(report.read_text())
        names = [c["name"] for c in verdict["checks"]]
        assert names[:4] == ["nan_share", "ks_drift", "mmd_drift", "joint_drift"] and names[4] == CHECK
        series = next(c for c in verdict["checks"] if c["name"] == CHECK)
        assert series["limit"] == pytest.approx(SeriesOptions().threshold)
        assert verdict["details"]["series"]["nights"] == night
        assert "Ramdas" in verdict["details"]["series"]["reference"]
        assert load_state(state_file).nights == night
