"""run.py with the registry and the step run faked at their seams (`night_in_run`, `gate_in_run`, `plan_nightly`'s
registry): the nightly check against the champion (single task and fanned out), the release gate's profile
evidence, and the Pushgateway that may be down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.outcome import pipeline_outcome
from skewgate.common.recording import TrackingOptions
from skewgate.common.step_details import NightRecord
from skewgate.drift.core import make_profile
from skewgate.drift.run import (
    NIGHTLY_TAG,
    PROFILE_SHA_TAG,
    PROFILE_URI_TAG,
    DriftOptions,
    NightlyOptions,
    gate_in_run,
    night_in_run,
    partial_statistics,
    plan_nightly,
    require_tracking,
    run_nightly,
)
from skewgate.drift.stats.profile import load_profile, save_profile
from tests.drift.conftest import make_frame
from tests.drift.fakes import FakeRegistry, FakeStepRun

N = 1200
DATE = "2026-12-01T02:00:00+00:00"
UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused
NIGHTLY = NightlyOptions()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift-run")

    def snapshot(name, frame, parts=1):
        """A directory of `parts` Parquet files (what the fan-out deals to its shards)."""
        (tmp / name).mkdir()
        size = len(frame) // parts
        for k in range(parts):
            frame.iloc[k * size:(k + 1) * size].to_parquet(tmp / name / f"part-{k}.parquet")
        return str(tmp / name)

    reference = snapshot("reference", make_frame(N, seed=1))
    return SimpleNamespace(
        reference=reference, healthy=snapshot("healthy", make_frame(N, seed=2), 3),
        healthy_again=snapshot("healthy-again", make_frame(N, seed=5), 3),
        drifted=snapshot("drifted", make_frame(N, seed=3, shift=0.6), 3),
        profile=save_profile(make_profile(reference), tmp / "reference.profile"),
        other_profile=save_profile(make_profile(snapshot("other", make_frame(N, seed=4))), tmp / "other.profile"))


@pytest.fixture
def registry(data):
    registry = FakeRegistry()
    registry.add_champion(data.profile, version="3")
    return registry


@pytest.mark.parametrize(("snapshot", "status"), [("healthy", "pass"), ("drifted", "fail")],
                         ids=["healthy-snapshot-passes", "drifted-snapshot-fails"])
def test_nightly_judges_against_the_champions_profile_and_tags_the_champion(data, registry, tmp_path, snapshot,
                                                                            status):
    run = FakeStepRun()
    verdict = night_in_run(run, registry, model_name="m", current=getattr(data, snapshot), options=NIGHTLY,
                           run_date=DATE, heatmap=tmp_path / "heatmap", html=tmp_path / "report")
    assert verdict.status == status
    assert verdict.details["reference_from_profile"] is True
    assert verdict.subject is not None and verdict.subject.data["reference"] == load_profile(data.profile).sha256
    assert {k: verdict.details[k] for k in ("model_version", "run_date", "shards")} == {
        "model_version": "3", "run_date": DATE, "shards": 1}
    assert "pushgateway" not in verdict.details  # nothing was asked to be pushed
    tags = registry.tags["3"]
    assert tags[NIGHTLY_TAG] == f"{status} {DATE} run run-1"
    assert (registry.reads, registry.downloads) == (1, 1)  # the champion is looked up once a night
    assert len(run.tables["features.json"]) == 9  # every feature, logged to the step run
    assert {name for name, _ in run.artifacts} == {"coverage_heatmap.png", "drift_report.html"}
    assert (tmp_path / "heatmap").read_bytes()[:4] == b"\x89PNG"
    # the report shows the night as judged: the series' check, which decides the night, and the verdict's status
    report = (tmp_path / "report").read_text()
    assert "<b>series.anytime_valid</b>" in report and f"<h1>drift: {status.upper()}</h1>" in report


def test_what_the_pipeline_and_the_nightly_series_read_of_a_night_is_what_it_wrote(data, registry):
    """The parent run's version tag (`common.outcome`) and MLflow's nightly series (`mlflow_conventions`) read
    nightly drift's details from common: a field renamed here must fail this, not read nothing."""
    verdict = night_in_run(None, registry, model_name="m", current=data.drifted, options=NIGHTLY, run_date=DATE)
    assert NightRecord.of(verdict) == NightRecord(model_version="3", run_date=DATE)
    assert pipeline_outcome("nightly-drift", {"nightly-drift": verdict}).tags == {conv.MODEL_VERSION_TAG: "3"}
    assert conv.run_date(verdict) == datetime.fromisoformat(DATE)
    figures = conv.drift_statistics(verdict)
    assert figures["drift.mmd2"] == verdict.details["mmd"]["value"]
    assert {f"drift.feature.{row['feature']}.statistic" for row in verdict.details["features"]} <= figures.keys()


def _tagged_elsewhere(registry, data):
    registry.tags["3"][PROFILE_URI_TAG] = "mem://v3/profile/reference.profile"
    registry.artifacts["mem://v3/profile/reference.profile"] = data.other_profile  # bytes the digest does not name


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        pytest.param(lambda r, d: r.aliases.clear(), "@champion", id="no-champion"),
        pytest.param(lambda r, d: r.tags["3"].pop(PROFILE_URI_TAG), PROFILE_URI_TAG, id="champion-without-profile"),
        pytest.param(_tagged_elsewhere, PROFILE_SHA_TAG, id="profile-not-the-one-tagged"),
    ],
)
def test_nightly_cannot_evaluate_without_the_champions_own_profile(data, registry, break_it, message):
    break_it(registry, data)
    before = {v: dict(t) for v, t in registry.tags.items()}
    with pytest.raises(InputError, match=message):
        night_in_run(None, registry, model_name="m", current=data.healthy, options=NIGHTLY, run_date=DATE)
    assert registry.tags == before  # nothing tagged on a night that could not be judged


@pytest.mark.parametrize("snapshot", ["healthy", "drifted"])
def test_fanned_out_nightly_gives_the_single_task_verdict(data, registry, tmp_path, snapshot):
    current = getattr(data, snapshot)
    profile = tmp_path / "plan.profile"
    rows = plan_nightly(model_name="m", snapshot=current, profile_out=profile, options=NIGHTLY,
                        tracking=TrackingOptions(), registry=registry)
    assert rows == N and sha256_file(profile) == sha256_file(data.profile)
    partials = [str(partial_statistics(str(profile), current, shard=k, shards=2, rows=rows, out=str(tmp_path / f"{k}")))
                for k in range(2)]
    merged = night_in_run(None, registry, model_name="m", current=current, options=NIGHTLY, run_date=DATE,
                          partials=partials, profile=str(profile))
    single = night_in_run(None, registry, model_name="m", current=current, options=NIGHTLY, run_date=DATE)
    assert merged.status == single.status
    assert [(c.name, c.passed) for c in merged.checks] == [(c.name, c.passed) for c in single.checks]
    assert merged.check("ks_drift").value == single.check("ks_drift").value
    assert merged.details["shards"] == 2 and single.details["shards"] == 1
    assert merged.subject == single.subject  # the whole snapshot's digest, as one pass records it


def test_fan_out_refuses_partials_of_a_profile_that_is_no_longer_the_champions(data, registry, tmp_path):
    rows = plan_nightly(model_name="m", snapshot=data.healthy, profile_out=tmp_path / "plan.profile", options=NIGHTLY,
                        tracking=TrackingOptions(), registry=registry)
    partial = partial_statistics(str(tmp_path / "plan.profile"), data.healthy, shard=0, shards=1, rows=rows,
                                 out=str(tmp_path / "0"))
    registry.add_champion(data.other_profile, version="4")  # promoted while the shards ran
    with pytest.raises(InputError, match=PROFILE_SHA_TAG):
        night_in_run(None, registry, model_name="m", current=data.healthy, options=NIGHTLY, partials=[str(partial)],
                     profile=str(tmp_path / "plan.profile"))


@pytest.mark.parametrize("run_date", ["", "{{$.pipeline_job_schedule_time_utc}}"],
                         ids=["no-date", "unresolved-kfp-placeholder"])
def test_an_unscheduled_night_is_dated_now(data, registry, run_date):
    verdict = night_in_run(None, registry, model_name="m", current=data.healthy, options=NIGHTLY, run_date=run_date)
    dated = datetime.fromisoformat(verdict.details["run_date"])
    assert abs(datetime.now(UTC) - dated) < timedelta(minutes=5)
    # no step run (no tracking): no run id to record
    assert registry.tags["3"][NIGHTLY_TAG] == f"{verdict.status} {verdict.details['run_date']}"


def test_an_unreachable_pushgateway_is_recorded_and_the_verdict_stands(data, registry):
    verdict = night_in_run(None, registry, model_name="m", current=data.drifted, run_date=DATE,
                           options=NightlyOptions(pushgateway_url=UNREACHABLE))
    assert verdict.status == "fail"
    assert verdict.details["pushgateway"].startswith(f"not pushed: pushgateway {UNREACHABLE}")
    assert registry.tags["3"][NIGHTLY_TAG].startswith("fail ")


def test_release_gate_records_the_profile_it_wrote_as_registry_evidence(data, tmp_path):
    run, out = FakeStepRun(), tmp_path / "profile"
    verdict = gate_in_run(run, reference=data.reference, current=data.healthy, options=DriftOptions(sketch=256),
                          profile_out=out)
    assert verdict.registry_tags == {PROFILE_URI_TAG: "mem://run-1/profile/reference.profile",
                                     PROFILE_SHA_TAG: sha256_file(out)}
    assert run.artifacts[("reference.profile", "profile")] == out.read_bytes()
    saved = load_profile(out)
    assert saved.ks_error_bound > 0  # cut to `sketch` values: what a reusable profile holds
    assert "raw_reference" not in saved.extra
    assert verdict.details["reference_from_profile"] is False


@pytest.mark.parametrize(("tracked", "profile_out"), [(False, True), (True, False)],
                         ids=["untracked-profile-not-evidence", "no-profile-asked"])
def test_no_registry_evidence_without_a_logged_profile(data, tmp_path, tracked, profile_out):
    out = tmp_path / "profile"
    verdict = gate_in_run(FakeStepRun() if tracked else None, reference=data.reference, current=data.healthy,
                          options=DriftOptions(), profile_out=out if profile_out else None)
    assert verdict.registry_tags == {}
    assert out.exists() == profile_out


def test_cli_style_push_is_recorded_in_the_details(data):
    verdict = gate_in_run(None, reference=data.reference, current=data.healthy,
                          options=DriftOptions(pushgateway_url=UNREACHABLE, pushgateway_model="m"))
    assert verdict.status == "pass" and verdict.details["pushgateway"].startswith("not pushed")


def test_nightly_needs_tracking(data):
    with pytest.raises(InputError, match="tracking_uri"):
        require_tracking(None)
    run = FakeStepRun()
    assert require_tracking(run) is run
    verdict = run_nightly(model_name="m", current=data.healthy, options=NIGHTLY, tracking=TrackingOptions()).verdict
    assert verdict.status == "error" and "tracking_uri" in verdict.message



def test_nightly_carries_the_series_on_the_champions_tags_and_a_new_profile_starts_a_new_one(data, registry,
                                                                                             tmp_path):
    from skewgate.drift.stats.series import CHECK, SeriesState, load_state

    for night, current in ((1, data.healthy), (2, data.healthy_again), (2, data.healthy_again)):  # then a retry
        verdict = night_in_run(None, registry, model_name="m", current=current, options=NIGHTLY, run_date=DATE,
                               series_out=tmp_path / "series.json")
        assert verdict.status == "pass"
        assert [c.name for c in verdict.checks][-1] == CHECK
        assert verdict.details["series"]["nights"] == night
        state = SeriesState.from_tags(registry.tags["3"])
        assert state is not None and state.nights == night and state == load_state(tmp_path / "series.json")
        assert state.profile == registry.tags["3"][PROFILE_SHA_TAG]
    # the file, when given, is read instead of the tags; a new profile on the version starts a new series
    assert night_in_run(None, registry, model_name="m", current=data.healthy, options=NIGHTLY,
                        series_in=tmp_path / "missing.json").details["series"]["nights"] == 1
    registry.add_champion(data.other_profile, version="3")
    registry.tags["3"].update(state.tags())
    assert night_in_run(None, registry, model_name="m", current=data.healthy,
                        options=NIGHTLY).details["series"]["nights"] == 1
