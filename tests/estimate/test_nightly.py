"""The nightly estimate against an in-memory registry (the real MLflow registry: tests/integration): the champion's
own profile calibrates tonight, the version is tagged with the night and its history, labels that arrive later
join their snapshot's entry, and a champion without a profile, or a profile or model that is not what the tags
say, is an error naming the tag."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.registry import Champion
from skewgate.estimate.core import EstimateOptions, estimate
from skewgate.estimate.nightly.night import HISTORY_TAG, NIGHTLY_TAG, NightlyEstimateOptions, history_of, night_in_run
from tests.drift.fakes import FakeStepRun

OPTIONS = NightlyEstimateOptions()


class ModelRegistry:
    """One model's champion as promote leaves it: the ONNX file (downloaded into `workdir/model`), its digest
    tag and the estimate profile's URI and digest tags."""

    def __init__(self, onnx: Path, profile: Path) -> None:
        self.onnx, self.profile = onnx, profile
        self.tags = {conv.ONNX_DIGEST_TAG: sha256_file(onnx),
                     conv.ESTIMATE_PROFILE_URI_TAG: "mem://run-0/profile/estimate.profile",
                     conv.ESTIMATE_PROFILE_SHA_TAG: sha256_file(profile)}

    def fetch(self, name, alias, workdir=None, *, attestations=False):
        if alias != "champion":
            return None
        model_dir = None
        if workdir is not None:
            model_dir = workdir / "model"
            model_dir.mkdir(parents=True)
            shutil.copy(self.onnx, model_dir / "model.onnx")
            (model_dir / "MLmodel").write_text("flavors: {}\n")
        return Champion(model_name=name, alias=alias, version="4", tags=dict(self.tags), model_dir=model_dir)

    def download(self, artifact_uri, directory):
        assert artifact_uri == self.tags[conv.ESTIMATE_PROFILE_URI_TAG]
        return Path(shutil.copy(self.profile, directory / "estimate.profile"))

    def set_tags(self, name, version, tags):
        assert version == "4"
        self.tags.update(tags)


@pytest.fixture
def registry(files, tmp_path):
    profile = tmp_path / "estimate.profile"
    estimate(onnx=files["model"], reference=files["reference"], current=files["ignored"], options=EstimateOptions(),
             profile_out=profile)
    return ModelRegistry(files["model"], profile)


def _night(registry, files, current, *, date, labels=None, step_run=None, **changes):
    return night_in_run(step_run, registry, model_name="clf", current=files[current], options=OPTIONS,
                        run_date=date, labels=labels, **changes)


def test_a_night_estimates_from_the_champions_profile_and_tags_the_version(registry, files, tmp_path):
    step_run = FakeStepRun()
    verdict = _night(registry, files, "boundary", date="2026-12-01T02:00:00+00:00", step_run=step_run,
                     history_plot=tmp_path / "nights.png")
    assert verdict.step == "nightly-estimate" and verdict.status == "fail"
    low, high = verdict.details["estimated_interval"]
    assert low <= files["boundary_realised"] <= high
    assert verdict.details["model_version"] == "4"
    assert registry.tags[NIGHTLY_TAG] == (f"fail 2026-12-01T02:00:00+00:00 accuracy "
                                          f"{verdict.details['estimated_accuracy']:.4f} [{low:.4f}, {high:.4f}] "
                                          "run run-1")
    assert [n["status"] for n in history_of(registry.tags)] == ["fail"]
    assert (tmp_path / "nights.png").stat().st_size > 10_000
    assert ("estimate_nights.png", None) in step_run.artifacts


def test_the_plots_are_pngs_at_the_paths_given_even_without_a_suffix(registry, files, tmp_path):
    """A KFP output artifact's path has no suffix: matplotlib would otherwise add `.png` to it, and the task fail
    when the file it was told to write is not there."""
    _night(registry, files, "boundary", date="2026-12-01", plot=tmp_path / "reliability_plot",
           history_plot=tmp_path / "nights_plot")
    for name in ("reliability_plot", "nights_plot"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_labels_arriving_for_a_past_night_join_its_entry_and_the_history_keeps_the_last_nights(registry, files,
                                                                                                tmp_path):
    for day, current in [(1, "ignored"), (2, "boundary"), (3, "ignored"), (4, "mild")]:
        _night(registry, files, current, date=f"2026-12-0{day}")
    nights = history_of(registry.tags)
    # the same snapshot twice is one entry, dated by its first night
    assert [(n["date"], n["status"]) for n in nights] == [("2026-12-01", "pass"), ("2026-12-02", "fail"),
                                                         ("2026-12-04", "fail")]
    x = np.load(files["boundary"])["x"]
    truth = (1 / (1 + np.exp(-3 * x[:, 0])) > np.random.default_rng(9).random(len(x))).astype(np.int64)
    np.save(tmp_path / "labels.npy", truth)
    verdict = _night(registry, files, "boundary", date="2026-12-05", labels=tmp_path / "labels.npy")
    row = verdict.details["table"][0]
    predicted_one = x[:, 0] * 1.5 + 0.3 > 0  # the simulation's model
    assert row["realised"] == pytest.approx(np.mean(predicted_one == truth.astype(bool)))
    assert row["covered"] is (row["low"] <= row["realised"] <= row["high"])
    entry = next(n for n in history_of(registry.tags) if n["date"] == "2026-12-02")
    assert entry["realised"] == round(row["realised"], 4)
    assert verdict.details["run_date"] == "2026-12-02"  # charted at the snapshot's night, beside its estimate
    assert len(history_of(registry.tags)) == 3
    limited = night_in_run(None, registry, model_name="clf", current=files["wide"], run_date="2026-12-06",
                           options=NightlyEstimateOptions(history_nights=2))
    assert [n["date"] for n in limited.details["nights"]] == ["2026-12-04", "2026-12-06"]


def test_the_history_tag_keeps_the_newest_nights_that_fit_mlflows_tag_limit():
    from skewgate.common.verdict import Check, Subject, Verdict
    from skewgate.estimate.nightly.night import TAG_LIMIT, history_tag, history_with

    row = {"metric": "accuracy", "reference": 0.9, "estimated": 0.85, "low": 0.83, "high": 0.87}
    tonight = Verdict.from_checks("estimate", [Check("performance.estimated_drop", passed=True)],
                                  subject=Subject("m", "0" * 64, data={"current": "f" * 64}), details={"table": [row]})
    past = [{"date": f"2026-10-{i:03d}", "snapshot": f"{i:016x}", "status": "pass", "reference": 0.9,
             "estimated": 0.85, "low": 0.83, "high": 0.87} for i in range(100)]
    kept = history_with(past, tonight, date="2026-12-01", keep=1000)
    assert len(history_tag(kept)) <= TAG_LIMIT < len(history_tag([past[-len(kept)], *kept]))  # one more: too long
    assert kept[-1]["snapshot"] == "f" * 16 and kept[0] == past[-(len(kept) - 1)]  # the oldest went first


def test_a_history_tag_someone_overwrote_starts_a_new_history(registry, files):
    registry.tags[HISTORY_TAG] = "not json"
    _night(registry, files, "ignored", date="2026-12-01")
    assert len(json.loads(registry.tags[HISTORY_TAG])) == 1


@pytest.mark.parametrize(("damage", "message"), [
    pytest.param(lambda r: r.tags.pop(conv.ESTIMATE_PROFILE_URI_TAG), "skewgate.estimate.profile_uri: expected an "
                 "estimate profile recorded at promotion", id="champion-without-profile"),
    pytest.param(lambda r: r.tags.update({conv.ESTIMATE_PROFILE_SHA_TAG: "0" * 64}),
                 f"skewgate.estimate.profile_sha256: expected {'0' * 64}", id="profile-not-the-tagged-one"),
    pytest.param(lambda r: r.tags.update({conv.ONNX_DIGEST_TAG: "1" * 64}),
                 f"skewgate.onnx_sha256: expected a file with sha256 {'1' * 64}", id="model-not-the-gated-one"),
])
def test_a_champion_whose_tags_do_not_hold_is_an_error_naming_the_tag(registry, files, damage, message):
    damage(registry)
    with pytest.raises(InputError, match=message):
        _night(registry, files, "ignored", date="2026-12-01")
    assert NIGHTLY_TAG not in registry.tags  # nothing is tagged on a night that could not be estimated


@pytest.mark.parametrize(("labels", "message"), [
    pytest.param(np.zeros(3999, dtype=np.int64), "expected one label per current sample: 4000", id="one-short"),
    pytest.param(np.zeros(4000), "integer class labels", id="float-labels"),
    pytest.param(np.full(4000, 2), r"class indices in \[0, 2\)", id="a-third-class"),
])
def test_snapshot_labels_that_do_not_fit_are_an_error_and_nothing_is_tagged(registry, files, tmp_path, labels,
                                                                            message):
    np.save(tmp_path / "labels.npy", labels)
    with pytest.raises(InputError, match=message):
        _night(registry, files, "boundary", date="2026-12-01", labels=tmp_path / "labels.npy")
    assert NIGHTLY_TAG not in registry.tags


def test_an_alias_that_points_nowhere_is_an_error_naming_it(registry, files):
    with pytest.raises(InputError, match=r"clf: @staging: expected a model version with this alias"):
        night_in_run(None, registry, model_name="clf", current=files["ignored"],
                     options=NightlyEstimateOptions(alias="staging"))
