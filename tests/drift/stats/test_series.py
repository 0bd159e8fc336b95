"""The anytime-valid nightly series (series.py): its false-alarm probability over every night against one stored
profile, its detection of a planted shift, and its state carried from night to night (file, registry tags)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.drift.cli import main
from skewgate.drift.stats import ks
from skewgate.drift.stats.series import (
    CHECK,
    TAIL,
    NightEvidence,
    SeriesOptions,
    SeriesState,
    advance,
    calibrate,
    feature_pvalue,
    judge,
    load_state,
    night_evidence,
    reference_eps,
    save_state,
)
from tests.drift.conftest import make_frame

ALPHA = 0.05
OPTIONS = SeriesOptions(alpha=ALPHA)


def evidence(given_profile: float, two_sample: float = 1.0) -> NightEvidence:
    return NightEvidence(given_profile, two_sample, 1)


def ks_row(d: float, n: int, m: int) -> dict:
    """A numeric feature's row of the gate's table: KS distance `d` and its two-sample p-value."""
    return {"test": "ks", "statistic": d, "effect": d, "pvalue": ks.ks_pvalue(d, n, m), "reference_n": n,
            "current_n": m}


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
            state = advance(state, night_evidence([ks_row(d, n, m)], delta=options.delta), profile="ref",
                            options=options)
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
    row = ks_row(0.1, 1000, 400)
    alone = night_evidence([row], delta=0.01)
    assert alone.features == 1 and alone.given_profile > ks.kolmogorov_sf(0.1 * math.sqrt(400))  # D less eps
    assert alone.two_sample == pytest.approx(row["pvalue"])  # the gate's own two-sample p-value
    pair = night_evidence([row, ks_row(0.0, 1000, 400)], delta=0.01)
    assert pair.features == 2 and pair.given_profile >= alone.given_profile
    assert pair.two_sample == pytest.approx(2 * row["pvalue"])  # Bonferroni over the features
    assert night_evidence([{"test": "chi2", "statistic": 3.0, "effect": 0.2, "pvalue": 1e-9}],
                          delta=0.01) == NightEvidence(1.0, 1.0, 0)


def test_the_state_round_trips_through_the_file_and_a_missing_file_starts_a_new_series(tmp_path):
    path = tmp_path / "series.json"
    assert load_state(path) is None
    state = advance(None, evidence(0.01), profile="abc", date="d1")
    assert (state.nights, state.started) == (1, "d1")
    assert state.evalue == pytest.approx(0.5 * calibrate(0.01))
    save_state(state, path)
    assert load_state(path) == state
    again = advance(load_state(path), evidence(0.2), profile="abc", date="d2")
    assert again.nights == 2 and again.started == "d1"
    assert again.evalue == pytest.approx((state.evalue + 1 / 6) * calibrate(0.2))
    assert advance(again, evidence(0.2), profile="another").nights == 1  # a new profile: a new series
    assert SeriesState.from_tags(again.tags()) == again
    assert SeriesState.from_tags({}) is None
    path.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(InputError):
        load_state(path)


def test_the_alarm_stays_until_a_new_profile():
    state = advance(None, evidence(1e-9), profile="abc")
    assert (state.alarmed_night, state.alarmed_by) == (1, "e-process")
    for _ in range(30):
        state = advance(state, evidence(1.0), profile="abc")
    assert state.alarmed_night == 1 and state.evalue < SeriesOptions().threshold
    assert advance(state, evidence(1.0), profile="new").alarmed_night is None


def test_the_cli_reports_tonight_and_the_series_and_carries_the_state(tmp_path, write):
    reference = write("reference", make_frame(600, seed=1))
    state_file = tmp_path / "state" / "series.json"
    for night in range(1, 6):  # healthy nights through the CLI: none fails, each adds one night to the state
        current = write(f"night{night}", make_frame(600, seed=10 + night))
        report = tmp_path / f"night{night}.json"
        code = main(["--reference", str(reference), "--current", str(current), "--report", str(report),
                     "--series-state", str(state_file)])
        assert code == 0
        verdict = json.loads(report.read_text())
        names = [c["name"] for c in verdict["checks"]]
        assert names == ["nan_share", "ks_drift", "mmd_drift", "joint_drift", "testable", "new_ids", CHECK]
        series = next(c for c in verdict["checks"] if c["name"] == CHECK)
        assert series["limit"] == pytest.approx(SeriesOptions().threshold)
        assert verdict["details"]["series"]["nights"] == night
        assert "Ramdas" in verdict["details"]["series"]["reference"]
        assert load_state(state_file).nights == night


def _tonight(*, joint: bool, testable: bool = True, snapshot: str = "snap-1") -> Verdict:
    """A night's verdict as the gate makes it: `joint` = KS and MMD both flagged tonight."""
    checks = [Check("ks_drift", passed=not joint, value=float(joint), limit=0, severity="warn"),
              Check("mmd_drift", passed=not joint, value=0.01 if joint else 0.5, limit=0.05, severity="warn"),
              Check("joint_drift", passed=not joint, value=float(joint), limit=0, detail="both"),
              Check("testable", passed=testable, value=float(not testable), limit=0)]
    return Verdict.from_checks("drift", checks, subject=Subject(artifact="night", sha256="0" * 64,
                                                                data={"reference": "r", "current": snapshot}))


HEALTHY = [ks_row(0.02, 5000, 500)]
SHIFTED = [ks_row(0.4, 5000, 500)]


@pytest.mark.parametrize(("joint", "rows", "status"), [
    (True, HEALTHY, "warn"),  # tonight's test fired by chance: reported, the series decides
    (False, HEALTHY, "pass"),
    (True, SHIFTED, "fail"),  # the series alarms
], ids=["chance-joint-drift-warns", "healthy-passes", "series-alarm-fails"])
def test_with_a_series_the_series_decides_the_night(joint, rows, status):
    judged, _ = judge(_tonight(joint=joint), rows, None, profile="p")
    assert judged.status == status
    joint_check = next(c for c in judged.checks if c.name == "joint_drift")
    assert joint_check.severity == "warn" and "the series decides" in joint_check.detail


def test_with_a_series_a_feature_that_could_not_be_judged_still_fails():
    judged, _ = judge(_tonight(joint=False, testable=False), HEALTHY, None, profile="p")
    assert judged.status == "fail" and judged.message == "failed: testable"


def test_a_year_of_healthy_nights_through_the_gate_never_fails():
    """Null nights through judge, with tonight's own test firing on its share of them (5 %, as a per-night test
    at alpha does): no night fails, where the per-night decision alone failed about 18 of them."""
    rng = np.random.default_rng(3)
    reference = ks.ReferenceECDF.exact(rng.normal(size=5000))
    state, statuses, chance = None, [], 0
    for night in range(365):
        d = ks.ks_statistic(reference, rng.normal(size=500))
        joint = ks.ks_pvalue(d, 5000, 500) < ALPHA
        chance += joint
        judged, state = judge(_tonight(joint=joint, snapshot=f"night-{night}"),
                              [ks_row(d, 5000, 500)], state, profile="p", min_effect=0.05)
        statuses.append(judged.status)
    assert chance >= 5 and "fail" not in statuses and state.nights == 365


def test_judging_the_same_snapshot_again_replaces_the_night():
    """A retried run is the same night: the series neither counts it twice nor loses it."""
    _, state = judge(_tonight(joint=False, snapshot="a"), HEALTHY, None, profile="p")
    second, state = judge(_tonight(joint=False, snapshot="b"), SHIFTED, state, profile="p")
    assert state.nights == 2 and second.status == "fail"
    retried, again = judge(_tonight(joint=False, snapshot="b"), HEALTHY, state, profile="p")
    assert again.nights == 2 and retried.status == "pass"  # the retry replaced night 2's evidence
    healthy = night_evidence(HEALTHY, delta=OPTIONS.delta)
    assert again.evalue == pytest.approx(advance(advance(None, healthy, profile="p"), healthy, profile="p").evalue)
    _, after = judge(_tonight(joint=False, snapshot="c"), HEALTHY, again, profile="p")
    assert after.nights == 3


@pytest.mark.parametrize(("floor", "counts"), [(0.0, True), (0.025, True), (0.05, False), (0.1, False)],
                         ids=["no-floor", "half-the-floor", "the-gate-floor", "twice-the-floor"])
def test_a_creep_below_the_gates_effect_floor_is_no_evidence(floor, counts):
    """A distance 0.04 beyond the reference's own error bound (the 0.06σ creep of #33 is KS D ≈ 0.024: here
    larger still): evidence without a floor or at half the gate's, none at the gate's 0.05."""
    eps = reference_eps(100_000, features=1, delta=OPTIONS.delta)
    d = eps + 0.04
    p = feature_pvalue(d, reference_n=100_000, current_n=20_000, features=1, delta=OPTIONS.delta, min_effect=floor)
    assert (p < 1e-3) is counts
    assert (p == 1.0) is (not counts)


@pytest.mark.parametrize(("factor", "alarms"), [(0.99, False), (1.01, True)], ids=["just-below", "just-above"])
def test_the_series_alarms_exactly_at_its_threshold(factor, alarms):
    """Night 1 carries M = (0 + 1/2)·e(p): a p whose e-value puts M 1 % below or above the e-process threshold,
    1/(alpha − delta − alpha_night)."""
    target = 2 * OPTIONS.threshold * factor
    low, high = 1e-12, 0.5  # e(p) falls as p grows: bisect for e(p) = target
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if calibrate(middle) > target else (low, middle)
    state = advance(None, evidence(high), profile="p", options=OPTIONS)
    assert state.evalue == pytest.approx(OPTIONS.threshold * factor, rel=1e-6)
    assert (state.alarmed_night == 1) is alarms


@pytest.mark.parametrize(("night", "horizon"), [(1, 365), (365, 365), (12, 10)],
                         ids=["first-night", "last-night-of-the-horizon", "beyond-the-horizon"])
@pytest.mark.parametrize(("factor", "alarms"), [(0.99, True), (1.01, False)], ids=["just-inside", "just-outside"])
def test_one_night_alone_alarms_at_its_share_of_alpha(night, horizon, factor, alarms):
    """Tonight's two-sample p-value 1 % inside or outside alpha_night · w_t: w_t = (1 − TAIL)/H within the
    horizon (Bonferroni over its nights), TAIL·H/(t(t − 1)) beyond."""
    options = SeriesOptions(alpha=ALPHA, horizon=horizon)
    weight = (1 - TAIL) / horizon if night <= horizon else TAIL * horizon / (night * (night - 1))
    assert options.night_level(night) == pytest.approx(ALPHA * options.night_share * weight)
    state = None
    for _ in range(night - 1):
        state = advance(state, evidence(1.0), profile="p", options=options)
    state = advance(state, evidence(1.0, options.night_level(night) * factor), profile="p", options=options)
    assert state.evalue < options.threshold  # the e-process saw nothing: tonight alone decides
    assert (state.alarmed_night, state.alarmed_by) == ((night, "night") if alarms else (None, None))


def test_the_single_night_levels_and_the_e_process_share_alpha():
    options = SeriesOptions(alpha=ALPHA, horizon=30)
    levels = sum(options.night_level(t) for t in range(1, 300_001))
    assert levels == pytest.approx(options.alpha_night * (1 - TAIL * 30 / 300_000), rel=1e-6)  # → alpha_night
    assert options.delta + options.alpha_night + 1 / options.threshold == pytest.approx(ALPHA)
    with pytest.raises(InputError, match="night_share"):
        SeriesOptions(reference_share=0.5, night_share=0.5)


@pytest.mark.parametrize(("floor", "counts"), [(0.0, True), (0.05, False)], ids=["no-floor", "the-gate-floor"])
def test_below_the_floor_the_two_sample_pvalue_is_no_evidence_either(floor, counts):
    """D − eps = 0.04 on 20,000 rows a side: a two-sample p-value far below any night's level, and no evidence
    at the gate's effect floor."""
    d = reference_eps(20_000, features=1, delta=OPTIONS.delta) + 0.04
    found = night_evidence([ks_row(d, 20_000, 20_000)], delta=OPTIONS.delta, min_effect=floor)
    assert (found.two_sample < 1e-9) is counts and (found.two_sample == 1.0) is (not counts)


def test_a_version_1_state_is_read_and_starts_a_new_series():
    old = {"schema": "skewgate.drift-series", "version": 1, "profile": "abc", "nights": 40, "evalue": 3.0,
           "alpha": ALPHA, "reference_share": 0.2}
    state = SeriesState.from_json(old)
    assert state.nights == 40
    assert advance(state, evidence(0.5), profile="abc").nights == 1  # its method is not today's


def test_a_sudden_shift_is_found_on_its_first_nights_as_bonferroni_over_365_nights_does():
    """A 0.2σ shift after 100 healthy nights (reference 5,000 values, 500 a night; the bench's sizes): the
    series alarms within 10 nights in every year, and on the night Bonferroni over 365 nights first does or
    sooner in most."""
    rng = np.random.default_rng(5)
    delays = []
    for _ in range(12):
        reference = ks.ReferenceECDF.exact(rng.normal(size=5000))
        state, bonferroni = None, None
        for night in range(1, 131):
            d = ks.ks_statistic(reference, rng.normal(loc=0.2 if night >= 100 else 0.0, size=500))
            if bonferroni is None and night >= 100 and ks.ks_pvalue(d, 5000, 500) < ALPHA / 365:
                bonferroni = night
            state = advance(state, night_evidence([ks_row(d, 5000, 500)], delta=OPTIONS.delta, min_effect=0.05),
                            profile="p", options=OPTIONS)
        assert state.alarmed_night is not None and 100 <= state.alarmed_night < 110
        delays.append((state.alarmed_night, bonferroni or 131))
    assert sum(series <= plain for series, plain in delays) >= 8, delays


def test_a_periodic_profile_widens_the_reference_allowance_over_all_its_periods():
    """Seven weekday profiles: the DKW event must hold for 7·K reference ECDFs, so the same distance is weaker
    evidence given the profile (the two-sample p of tonight alone is unchanged)."""
    row = ks_row(0.09, n=5000, m=500)
    one, seven = (night_evidence([row], delta=0.01, min_effect=0.0, profiles=p) for p in (1, 7))
    assert one.two_sample == seven.two_sample
    assert one.given_profile < seven.given_profile < 1.0
