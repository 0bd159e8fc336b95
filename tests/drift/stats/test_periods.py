"""`--period weekday`: a reference with a weekly cycle, a profile per weekday, each night against its own weekday.

Weekend rows are shifted by 0.6σ in the reference and in serving alike: against the whole reference every Saturday
looks drifted (and a series alarms on it), against Saturday's profile it does not, and a shift planted on a
Saturday still fails it."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skewgate.common.errors import InputError
from skewgate.drift.core import drift_gate, load_reference
from skewgate.drift.run import DriftOptions, write_profile
from skewgate.drift.stats.periods import WEEKDAYS, labels
from skewgate.drift.stats.profile import load_profile, periods_of
from skewgate.drift.stats.series import judge

MONDAY = dt.date(2026, 10, 5)
SATURDAY = dt.date(2026, 12, 5)
WEEKEND_SHIFT = 0.6


def day(rng, date, rows, *, shift=0.0):
    loc = (WEEKEND_SHIFT if date.weekday() >= 5 else 0.0) + shift
    seconds = rng.integers(0, 86_400, rows)
    stamps = [dt.datetime.combine(date, dt.time()) + dt.timedelta(seconds=int(s)) for s in seconds]
    return pa.table({"ts": pa.array(stamps, type=pa.timestamp("us")), "x": rng.normal(loc=loc, size=rows),
                     "y": rng.normal(size=rows)})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    rng = np.random.default_rng(0)  # a null p of 0.30 (seeds 0–19: one fails, as 1 in 20 should)
    root = tmp_path_factory.mktemp("periods")
    paths = {}
    tables = {
        "reference": pa.concat_tables([day(rng, MONDAY + dt.timedelta(days=d), 600) for d in range(28)]),
        "saturday": day(rng, SATURDAY, 800),
        "shifted_saturday": day(rng, SATURDAY, 800, shift=0.5),
        "friday_and_saturday": pa.concat_tables([day(rng, SATURDAY - dt.timedelta(days=1), 400),
                                                 day(rng, SATURDAY, 400)]),
    }
    for name, table in tables.items():
        paths[name] = root / f"{name}.parquet"
        pq.write_table(table, paths[name])
    paths["periodic"] = root / "weekday.profile"
    write_profile(paths["reference"], paths["periodic"], options=DriftOptions(timestamp="ts", period="weekday"))
    paths["pooled"] = root / "pooled.profile"
    write_profile(paths["reference"], paths["pooled"], options=DriftOptions(timestamp="ts"))
    return paths


def test_the_profile_holds_every_weekday_and_the_timestamp_is_no_feature(files):
    periods = periods_of(files["periodic"])
    assert periods is not None and periods.labels == list(WEEKDAYS) and set(periods.rows.values()) == {2400}
    saturday = load_profile(files["periodic"], period="Sat")
    assert saturday.numeric_names == ("x", "y") and "ts" not in saturday.dtypes and saturday.rows == 2400
    assert periods_of(files["pooled"]) is None


def test_a_weekly_cycle_alarms_against_the_whole_reference_and_not_against_its_weekday(files):
    pooled = drift_gate(reference=files["pooled"], current=files["saturday"])
    periodic = drift_gate(reference=files["periodic"], current=files["saturday"])
    assert pooled.verdict.status == "fail"
    assert periodic.verdict.status == "pass"
    assert periodic.details.period == {"period": "weekday", "timestamp": "ts", "judged": "Sat",
                                       "labels": list(WEEKDAYS)}


def test_the_series_alarms_on_the_cycle_only_without_a_period(files):
    pooled = drift_gate(reference=files["pooled"], current=files["saturday"])
    periodic = drift_gate(reference=files["periodic"], current=files["saturday"])
    assert judge(pooled.verdict, pooled.features, None, profile="p", min_effect=0.05)[1].alarmed_night == 1
    assert judge(periodic.verdict, periodic.features, None, profile="p", min_effect=0.05,
                 profiles=7)[1].alarmed_night is None


def test_a_shift_on_a_saturday_still_fails_against_saturdays_profile(files):
    result = drift_gate(reference=files["periodic"], current=files["shifted_saturday"])
    assert result.verdict.status == "fail"
    drifted = {row["feature"] for row in result.features if row["drifted"]}
    assert drifted == {"x"}
    assert judge(result.verdict, result.features, None, profile="p", min_effect=0.05,
                 profiles=7)[1].alarmed_night == 1


def test_a_night_spanning_two_weekdays_names_them(files):
    with pytest.raises(InputError, match=r"ts.*one weekday.*Fri \(400 rows\), Sat \(400 rows\)"):
        load_reference(files["periodic"], files["friday_and_saturday"])


def test_a_periodic_profile_is_not_read_as_one_data_sets(files):
    with pytest.raises(InputError, match="a profile per weekday"):
        load_profile(files["periodic"])
    with pytest.raises(InputError, match=r"ts.*Mon, Tue.*found Caturday"):
        load_profile(files["periodic"], period="Caturday")


@pytest.mark.parametrize(("values", "expected"), [
    (pa.array([dt.date(2026, 12, 5), dt.date(2026, 12, 7)]), ["Sat", "Mon"]),
    (pa.array(["2026-12-05T10:00:00", "2026-12-06"]), ["Sat", "Sun"]),
    (pa.array(["2026-12-05T23:30:00+00:00"]), ["Sat"]),
    (pa.array([dt.datetime(2026, 12, 5, 23)], type=pa.timestamp("ns", tz="America/New_York")), ["Sat"]),
], ids=["dates", "iso-text", "iso-text-with-offset", "zoned-timestamp"])
def test_weekdays_from_each_kind_of_timestamp(values, expected):
    assert list(labels(values, period="weekday", name="ts", source="f")) == expected


@pytest.mark.parametrize(("values", "message"), [
    (pa.array([1.0, 2.0]), "a timestamp, a date or ISO-8601 text.*type double"),
    (pa.array([dt.date(2026, 12, 5), None]), "a timestamp in every row.*1 rows without one"),
    (pa.array(["2026-12-05T10:00:00", "2026-12-05T10:00:00+02:00"]), "all with a zone offset or all without"),
], ids=["a-number", "a-missing-timestamp", "mixed-zones"])
def test_a_timestamp_that_sets_no_period_is_named(values, message):
    with pytest.raises(InputError, match=message):
        labels(values, period="weekday", name="ts", source="f")


def test_a_period_without_a_timestamp_is_refused(files, tmp_path):
    with pytest.raises(InputError, match="--period/--timestamp"):
        write_profile(files["reference"], tmp_path / "p.profile", options=DriftOptions(period="weekday"))
