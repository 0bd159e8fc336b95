"""estimate() end to end on real ONNX models in ONNX Runtime, on data whose truth is known (tests/estimate/
simulation.py): the gate blocks a shift that costs accuracy and passes one the model ignores, its limits decide
where they say, and what it cannot estimate is an error naming the file."""

from dataclasses import replace

import numpy as np
import pytest

from skewgate.estimate.core import EstimateOptions, estimate
from tests.estimate import simulation as sim

OPTIONS = EstimateOptions()


def _run(files, current, **changes):
    return estimate(onnx=files["model"], reference=files["reference"], current=files[current], labels=None,
                    options=replace(OPTIONS, **changes))


def _check(verdict, name):
    return next(c for c in verdict.checks if c.name == name)


def test_a_shift_into_the_decision_boundary_fails_and_the_estimate_is_close_to_what_the_labels_realise(files):
    verdict = _run(files, "boundary")
    assert verdict.status == "fail"
    assert _check(verdict, "performance.estimated_drop").passed is False
    details = verdict.details
    assert details["reference_accuracy"] - files["boundary_realised"] > 0.15  # the shift really costs accuracy
    assert abs(details["estimated_accuracy"] - files["boundary_realised"]) < 0.03
    low, high = details["estimated_interval"]
    assert low <= files["boundary_realised"] <= high


def test_a_shift_in_a_feature_the_model_ignores_passes(files):
    verdict = _run(files, "ignored")
    assert verdict.status == "pass", verdict.message
    assert abs(verdict.details["estimated_accuracy"] - files["ignored_realised"]) < 0.03
    assert verdict.details["table"][1]["metric"] == "macro_f1"


def test_max_drop_decides_just_inside_and_just_outside_both_ends_of_the_interval(files):
    """The check fails only when even the interval's top is more than max_drop below the reference, warns when
    only its bottom is, and passes above both."""
    row = _run(files, "mild").details["table"][0]
    smallest, largest = row["reference"] - row["high"], row["reference"] - row["low"]
    assert 0.02 < smallest < largest
    for max_drop, status in [(smallest * 0.98, "fail"), (smallest * 1.02, "warn"), (largest * 0.98, "warn"),
                             (largest * 1.02, "pass")]:
        verdict = _run(files, "mild", max_drop=max_drop)
        check = _check(verdict, "performance.estimated_drop")
        assert (verdict.status, check.value, check.limit) == (status, pytest.approx(smallest), max_drop), max_drop


def test_current_scores_outside_the_reference_range_warn_at_the_limit(files):
    share = _run(files, "wide").details["extrapolated_share"]
    assert 0.02 < share < 0.2  # x₀ spread twice the reference's: its tails score beyond what was calibrated
    assert _run(files, "wide", max_extrapolated=share * 0.95).status == "warn"
    assert _run(files, "wide", max_extrapolated=share * 1.05).status == "pass"


def test_data_mostly_outside_the_calibrated_range_is_not_judged_and_never_passes(files):
    """A serving bug multiplied the inputs by 16: the model still ranks well, but nearly every score lies beyond
    what the reference calibrated, where the calibration holds its edge value; the estimate is far from what the
    labels realise, so the drop cannot pass."""
    verdict = _run(files, "scaled")
    details, check = verdict.details, _check(verdict, "performance.estimated_drop")
    assert details["extrapolated_share"] > 0.5
    assert details["estimated_accuracy"] - files["scaled_realised"] > 0.05  # the estimate is not evidence here
    assert verdict.status == "fail" and check.passed is False and check.severity == "fail"
    assert check.detail.startswith(f"not judged: {details['extrapolated_share']:.2%} of current samples")
    assert check.value is None and check.limit is None  # no figure was held against the limit


def test_max_extrapolated_judged_decides_just_inside_and_just_outside(files):
    share = _run(files, "wide").details["extrapolated_share"]
    assert 0.02 < share < OPTIONS.max_extrapolated_judged  # judged by default: wider, not out of range
    for judged, passed in [(share * 0.95, False), (share * 1.05, True)]:
        verdict = _run(files, "wide", max_extrapolated=0.0, max_extrapolated_judged=judged)
        check = _check(verdict, "performance.estimated_drop")
        assert (check.passed, check.detail.startswith("not judged")) == (passed, not passed), judged
        assert verdict.status == ("warn" if passed else "fail")


def test_a_softmax_output_gives_the_estimate_its_logits_give(tmp_path):
    """The graph says whether the output is probabilities: read as logits, a Softmax's output would be squashed
    by a second softmax and calibrated on other scores."""
    rng = np.random.default_rng(1)
    x, labels = sim.three_class(rng, 3000, sim.REFERENCE)
    np.savez(tmp_path / "reference.npz", x=x, labels=labels)
    np.savez(tmp_path / "current.npz", x=sim.three_class(rng, 2000, sim.INTO_THE_BOUNDARY)[0])
    found = []
    for softmax in (False, True):
        model = sim.save_model(tmp_path / f"m{softmax}.onnx", sim.W3, softmax=softmax)
        verdict = estimate(onnx=model, reference=tmp_path / "reference.npz", current=tmp_path / "current.npz",
                           labels=None, options=replace(OPTIONS, metric="macro_f1"))
        found.append(verdict.details["table"])
    for logits_row, softmax_row in zip(*found, strict=True):
        assert softmax_row["estimated"] == pytest.approx(logits_row["estimated"], abs=1e-4)


def test_current_samples_with_nan_scores_fail_the_gate_naming_how_many(files, tmp_path):
    x = np.load(files["ignored"])["x"].copy()
    x[:3, 0] = np.nan
    np.savez(tmp_path / "nan.npz", x=x)
    verdict = estimate(onnx=files["model"], reference=files["reference"], current=tmp_path / "nan.npz", labels=None,
                       options=OPTIONS)
    check = _check(verdict, "current.scores_finite")
    assert verdict.status == "fail" and (check.passed, check.value) == (False, 3)
    assert verdict.details["current_samples"] == 4000


def test_tables_with_named_features_give_the_npz_estimate_and_a_kfp_path_needs_no_suffix(files, tmp_path):
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    def table(path):
        arrays = np.load(path)
        columns = {"income": arrays["x"][:, 1], "score": arrays["x"][:, 0]}  # not in the model's order
        if "labels" in arrays:
            columns["label"] = arrays["labels"]
        return pa.table(columns)

    pq.write_table(table(files["reference"]), tmp_path / "reference.parquet", row_group_size=1000)
    pq.write_table(table(files["boundary"]), tmp_path / "current")  # as a KFP Dataset artifact: no suffix
    pacsv.write_csv(table(files["boundary"]), tmp_path / "current.csv")
    expected = _run(files, "boundary").details["table"]
    for current in ("current", "current.csv"):
        verdict = estimate(onnx=files["model"], reference=tmp_path / "reference.parquet", current=tmp_path / current,
                           labels=None, options=replace(OPTIONS, features=("score", "income"), labels_key="label",
                                                        batch_rows=700))
        assert verdict.details["table"][0]["estimated"] == pytest.approx(expected[0]["estimated"], rel=1e-6)
        assert verdict.details["table"][0]["low"] == pytest.approx(expected[0]["low"], abs=2e-3)


@pytest.mark.parametrize(("change", "message"), [
    pytest.param({"features": ("score", "age")}, r"--features: expected columns \['score', 'age'\], found no "
                                                 r"column \['age'\]", id="missing-column"),
    pytest.param({"features": ()}, "--features: expected the columns that are the model's input", id="no-features"),
])
def test_a_table_without_the_named_features_is_an_error_naming_the_file(files, tmp_path, change, message):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from skewgate.common.errors import InputError

    x = np.load(files["reference"])["x"]
    pq.write_table(pa.table({"score": x[:, 0], "income": x[:, 1]}), tmp_path / "current.parquet")
    with pytest.raises(InputError, match=message) as err:
        estimate(onnx=files["model"], reference=files["reference"], current=tmp_path / "current.parquet", labels=None,
                 options=replace(OPTIONS, **change))
    assert "current.parquet" in str(err.value)


def _labels_file(files, tmp_path, values):
    np.save(tmp_path / "labels.npy", values)
    return tmp_path / "labels.npy"


@pytest.mark.parametrize(("labels", "message"), [
    pytest.param(np.zeros(4000), "integer class labels .* not supported", id="regression-targets"),
    pytest.param(np.zeros(3999, dtype=np.int64), "one label per reference sample: 4000", id="one-short"),
    pytest.param(np.full(4000, 2), r"class indices in \[0, 2\)", id="a-third-class"),
])
def test_labels_the_estimate_cannot_use_are_an_error_naming_their_file(files, tmp_path, labels, message):
    from skewgate.common.errors import InputError

    path = _labels_file(files, tmp_path, labels)
    with pytest.raises(InputError, match=message) as err:
        estimate(onnx=files["model"], reference=files["reference"], current=files["ignored"], labels=path,
                 options=OPTIONS)
    assert "labels.npy" in str(err.value)


def test_labels_from_a_file_are_the_labels_of_the_reference_array(files, tmp_path):
    path = _labels_file(files, tmp_path, np.load(files["reference"])["labels"])
    verdict = estimate(onnx=files["model"], reference=files["reference"], current=files["ignored"], labels=path,
                       options=OPTIONS)
    assert verdict.details["table"] == _run(files, "ignored").details["table"]
    assert "labels" in verdict.subject.data


def test_nan_scores_on_the_reference_are_an_error_naming_it(files, tmp_path):
    from skewgate.common.errors import InputError

    arrays = dict(np.load(files["reference"]))
    arrays["x"][5] = np.nan
    np.savez(tmp_path / "reference.npz", **arrays)
    with pytest.raises(InputError, match=r"reference.npz: expected finite model scores .* found 1 samples"):
        estimate(onnx=files["model"], reference=tmp_path / "reference.npz", current=files["ignored"], labels=None,
                 options=OPTIONS)


@pytest.mark.parametrize(("change", "message"), [
    pytest.param({"resamples": 99}, "at least 100 bootstrap calibrations", id="resamples"),
    pytest.param({"confidence": 1.0}, r"a level in \[0.5, 1\)", id="confidence"),
    pytest.param({"metric": "auc"}, "one of", id="metric"),
    pytest.param({"output": "probs"}, r"one of the outputs \['logits'\]", id="output"),
    pytest.param({"max_extrapolated": 0.3}, "max_extrapolated ≤ max_extrapolated_judged", id="warn-above-fail"),
    pytest.param({"max_extrapolated_judged": 1.5}, "max_extrapolated_judged ≤ 1", id="judged-above-one"),
])
def test_options_no_estimate_can_be_made_with_are_errors(files, change, message):
    from skewgate.common.errors import InputError

    with pytest.raises(InputError, match=message):
        _run(files, "ignored", **change)
