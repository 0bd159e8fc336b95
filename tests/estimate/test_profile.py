"""The estimate profile: what a champion carries so that a night estimates without labels. Estimating from it gives
the figures the labelled reference gives, it belongs to one model, and a damaged or foreign file is refused
naming the field."""

import io
import json
from dataclasses import replace

import numpy as np
import pytest

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.estimate.core import EstimateOptions, estimate
from skewgate.estimate.method.calibration import Reference
from skewgate.estimate.method.profile import load_profile
from skewgate.estimate.run import estimate_in_run
from tests.drift.fakes import FakeStepRun
from tests.estimate import simulation as sim

OPTIONS = EstimateOptions(resamples=120, seed=3)


@pytest.fixture(scope="module")
def profiled(files):
    """The boundary estimate from the labelled reference, and the profile it wrote."""
    path = files["dir"] / "estimate.profile"
    verdict = estimate(onnx=files["model"], reference=files["reference"], current=files["boundary"], labels=None,
                       options=OPTIONS, profile_out=path)
    return verdict, path


def test_estimating_from_the_profile_gives_the_figures_the_labelled_reference_gives(files, profiled):
    from_data, path = profiled
    from_profile = estimate(onnx=files["model"], profile=path, current=files["boundary"], options=EstimateOptions())
    assert from_profile.status == from_data.status == "fail"
    for key in ("table", "reference_ece", "uncalibrated_ece", "reference_out_of_fold_accuracy", "reliability",
                "current_confidence", "extrapolated_share", "reference_samples"):
        assert from_profile.details[key] == from_data.details[key], key
    # the profile's fit settings are what the verdict says it was judged with, not the defaults passed
    assert (from_profile.settings["resamples"], from_profile.settings["seed"]) == (120, 3)
    assert from_profile.subject.data == {"profile": sha256_file(path), "current": sha256_file(files["boundary"])}
    assert from_profile.details["profile"]["fit_on"] == {"reference": sha256_file(files["reference"])}


def test_a_profile_holds_plateau_ends_only_and_interpolates_as_the_full_fit(files):
    from scipy.optimize import isotonic_regression

    arrays = np.load(files["reference"])
    scores = np.stack([1 - (p := 1 / (1 + np.exp(-arrays["x"][:, 0]))), p], axis=1)
    fitted = Reference(scores, arrays["labels"]).fit().maps[0]
    order = np.argsort(scores[:, 1])
    full = isotonic_regression((arrays["labels"][order] == 1).astype(float)).x
    assert len(fitted.knots) < len(scores) / 10
    probe = np.linspace(scores[:, 1].min(), scores[:, 1].max(), 5001)
    np.testing.assert_allclose(fitted(probe), np.interp(probe, scores[order, 1], full), atol=1e-12)


def test_a_profile_of_another_model_is_refused_naming_the_digests(files, profiled, tmp_path):
    other = sim.save_model(tmp_path / "other.onnx", np.array([[1.0, -1.0], [0.0, 0.0]]))
    with pytest.raises(InputError, match=r"estimate.profile: model_sha256: expected [0-9a-f]{64} \(the SHA-256 of "):
        estimate(onnx=other, profile=profiled[1], current=files["boundary"], options=OPTIONS)


def test_a_profile_and_a_reference_together_or_neither_is_an_error(files, profiled):
    for sides in ({"reference": files["reference"], "profile": profiled[1]}, {}):
        with pytest.raises(InputError, match="exactly one: labelled reference data or an estimate profile"):
            estimate(onnx=files["model"], current=files["boundary"], options=OPTIONS, **sides)


def _rewrite(path, out, *, header=None, **arrays):
    with np.load(path) as archive:
        data = {k: archive[k] for k in archive.files}
    content = json.loads(str(data["header"]))
    if header:
        header(content)
    data.update(header=np.array(json.dumps(content)), **arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **{k: v for k, v in data.items() if v is not None})
    out.write_bytes(buffer.getvalue())
    return out


@pytest.mark.parametrize(("damage", "message"), [
    pytest.param(lambda h: h.update(version=2), r"header.schema/version: expected skewgate.estimate-profile v1",
                 id="newer-version"),
    pytest.param(lambda h: h.pop("seed"), "header.seed: expected a value, found no such field", id="missing-field"),
    pytest.param(lambda h: h.update(extra=1), r"header.extra: expected no unknown fields", id="unknown-field"),
    pytest.param(lambda h: h.update(samples="4000"), "header.samples: expected an integer", id="string-count"),
    pytest.param(lambda h: h["realised"].update(accuracy=1.5), r"header.realised: expected a share in \[0, 1\]",
                 id="accuracy-above-one"),
    pytest.param(lambda h: h.update(model_sha256="abc"), "header.model_sha256: expected a SHA-256", id="short-sha"),
    pytest.param(lambda h: h["reliability"][0].pop("accuracy"), r"header.reliability\[0\].accuracy",
                 id="reliability-row"),
])
def test_a_damaged_profile_header_is_refused_naming_the_field(profiled, tmp_path, damage, message):
    with pytest.raises(InputError, match=message):
        load_profile(_rewrite(profiled[1], tmp_path / "bad.profile", header=damage))


@pytest.mark.parametrize(("arrays", "message"), [
    pytest.param(lambda a: {"values": a["values"][::-1].copy()}, "knots/values: expected increasing finite knots",
                 id="decreasing-probabilities"),
    pytest.param(lambda a: {"offsets": a["offsets"][:-1]}, "offsets: expected 122 increasing offsets",
                 id="a-map-short"),
    pytest.param(lambda a: {"score_low": None}, r"score_low: expected exactly the arrays", id="missing-array"),
    pytest.param(lambda a: {"score_low": a["score_high"] + 1}, "score_low/score_high: expected 2 ranges",
                 id="range-upside-down"),
])
def test_damaged_profile_arrays_are_refused_naming_them(profiled, tmp_path, arrays, message):
    with np.load(profiled[1]) as archive:
        found = {k: archive[k] for k in archive.files}
    with pytest.raises(InputError, match=message):
        load_profile(_rewrite(profiled[1], tmp_path / "bad.profile", **arrays(found)))


@pytest.mark.parametrize(("resamples", "folds", "message"), [
    pytest.param(99, 5, r"header.resamples: expected at least 100 bootstrap calibrations, found 99", id="resamples-99"),
    pytest.param(100, 1, r"header.folds: expected folds ≥ 2", id="folds-1"),
])
def test_a_profile_fit_with_settings_no_estimate_accepts_is_refused(files, profiled, tmp_path, resamples, folds,
                                                                    message):
    """A well-formed profile whose fit is thinner than any command line may ask for (its interval would be too
    narrow) is refused as options are; 100 resamples and 2 folds, the least accepted, are estimated from."""
    with np.load(profiled[1]) as archive:
        arrays = {k: archive[k] for k in archive.files}
    offsets = arrays["offsets"][:resamples + 2]  # the full fit and `resamples` resamples (binary: one map each)

    def settings(header):
        header.update(resamples=resamples, folds=folds)

    path = _rewrite(profiled[1], tmp_path / "thin.profile", header=settings, offsets=offsets,
                    knots=arrays["knots"][:offsets[-1]], values=arrays["values"][:offsets[-1]])
    with pytest.raises(InputError, match=message):
        estimate(onnx=files["model"], profile=path, current=files["boundary"], options=OPTIONS)
    least = _rewrite(profiled[1], tmp_path / "least.profile", header=lambda h: h.update(resamples=100, folds=2),
                     offsets=arrays["offsets"][:102], knots=arrays["knots"][:arrays["offsets"][101]],
                     values=arrays["values"][:arrays["offsets"][101]])
    assert estimate(onnx=files["model"], profile=least, current=files["boundary"], options=OPTIONS).status == "fail"


def test_a_file_that_is_no_profile_is_refused_naming_it(files):
    with pytest.raises(InputError, match=r"reference.npz: expected a skewgate estimate profile"):
        load_profile(files["reference"])


def test_with_tracking_the_profile_is_logged_and_tagged_for_promotion(files, tmp_path):
    step_run = FakeStepRun()
    out = tmp_path / "estimate.profile"
    verdict = estimate_in_run(step_run, onnx=files["model"], reference=files["reference"], current=files["ignored"],
                              options=replace(OPTIONS, resamples=100), profile_out=out)
    assert step_run.artifacts[("estimate.profile", "profile")] == out.read_bytes()
    assert dict(verdict.registry_tags) == {
        conv.ESTIMATE_PROFILE_URI_TAG: "mem://run-1/profile/estimate.profile",
        conv.ESTIMATE_PROFILE_SHA_TAG: sha256_file(out)}
    assert set(verdict.registry_tags) <= conv.READ_BACK_TAGS  # promote copies them onto the version
    assert set(step_run.tables) == {"estimate.json", "reliability.json"}
