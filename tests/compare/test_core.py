"""compare's judgement on real (scikit-learn) models run by ONNX Runtime, the champion's files given as a folder
(as the registry's reader downloads them)."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.mlflow_conventions import ONNX_DIGEST_TAG
from skewgate.common.registry import Champion
from skewgate.compare.core import Judging, Threshold, compare
from skewgate.compare.run import DEFAULT_THRESHOLDS, CompareOptions, parse_thresholds
from tests.compare import models


def _judging(**changes):
    return CompareOptions(**changes).judging()


def _champion(path):
    """Version 1 of `m@champion`, whose evidence digest is `path`'s, downloaded into `path`'s folder (among other
    files)."""
    return Champion(model_name="m", alias="champion", version="1", tags={ONNX_DIGEST_TAG: sha256_file(path)},
                    model_dir=path.parent)


def _compare(candidate, champion, eval_data, *, labels=None, task="auto", slice_key="slices", **options):
    champ = None if champion is None else _champion(champion)
    return compare(candidate=candidate, champion=champ, eval_data=eval_data, labels=labels, task=task, output=None,
                   slice_key=slice_key, max_slices=50, judging=_judging(**options))


def test_better_candidate_passes(digits_models):
    built, data, _ = digits_models
    verdict = _compare(built["strong"], built["weak"], data)
    assert verdict.status == "pass"
    check = verdict.check("accuracy.vs_champion")
    assert check.value < -0.03  # the least the interval admits is an improvement of more than 3 points
    assert verdict.details["task"] == "classification"


def test_worse_candidate_fails_with_the_reason(digits_models):
    built, data, _ = digits_models
    verdict = _compare(built["weak"], built["strong"], data)
    assert verdict.status == "fail"
    assert "accuracy.vs_champion" in verdict.message and "macro_f1.vs_champion" in verdict.message
    detail = verdict.check("accuracy.vs_champion").detail
    assert "regression beyond the allowance of 0.005 at 95%" in detail
    row = next(r for r in verdict.details["table"] if r["slice"] == "(all)" and r["metric"] == "accuracy")
    assert row["ci_high"] < -0.005 and row["passed"] is False


@pytest.mark.parametrize("champion", ["strong_other_rows", "same_weights"])
def test_equal_within_the_interval_passes(digits_models, tmp_path, champion):
    built, data, _ = digits_models
    if champion == "same_weights":  # the same model, re-saved: other bytes, identical answers
        model = onnx.load(str(built["strong"]))
        model.producer_name = "re-saved"
        onnx.save(model, str(tmp_path / "same.onnx"))
        path = tmp_path / "same.onnx"
    else:
        path = built[champion]  # trained on other rows: a slightly different model of the same quality
    verdict = _compare(built["strong"], path, data)
    assert verdict.status == "pass", verdict.message
    row = next(r for r in verdict.details["table"] if r["slice"] == "(all)" and r["metric"] == "accuracy")
    assert row["ci_low"] <= row["difference"] <= row["ci_high"]
    assert row["ci_high"] >= -0.005


def test_a_champion_whose_files_do_not_match_its_evidence_is_not_run(digits_models):
    built, data, _ = digits_models
    tampered = Champion(model_name="m", alias="champion", version="1", tags={ONNX_DIGEST_TAG: "0" * 64},
                        model_dir=built["strong"].parent)
    with pytest.raises(InputError, match=r"models:/m/1: skewgate\.onnx_sha256: expected a file with sha256 0000"):
        compare(candidate=built["weak"], champion=tampered, eval_data=data, labels=None, task="auto", output=None,
                slice_key="slices", max_slices=50, judging=_judging())


def test_no_champion_passes_and_says_so(digits_models):
    built, data, _ = digits_models
    verdict = _compare(built["weak"], None, data)
    assert verdict.status == "pass"
    assert "first promotion" in verdict.check("champion").detail
    assert "champion" not in verdict.subject.data


def test_floor_blocks_without_a_champion(digits_models):
    built, data, _ = digits_models
    thresholds = parse_thresholds(["accuracy:floor=0.95"])
    assert _compare(built["strong"], None, data, thresholds=thresholds).status == "pass"
    verdict = _compare(built["weak"], None, data, thresholds=thresholds)
    assert verdict.status == "fail" and verdict.failed_checks[0].name == "accuracy.floor"


def test_relative_and_absolute_limits_both_apply(digits_models):
    built, data, _ = digits_models
    lenient = parse_thresholds(["accuracy:max_regression=none,max_relative_regression=0.5;"
                                "macro_f1:max_regression=0.5"])
    assert _compare(built["weak"], built["strong"], data, thresholds=lenient).status == "pass"
    strict_relative = parse_thresholds(["accuracy:max_regression=0.5,max_relative_regression=0.01",
                                        "macro_f1:max_regression=0.5"])
    verdict = _compare(built["weak"], built["strong"], data, thresholds=strict_relative)
    assert [c.name for c in verdict.failed_checks if not c.name.startswith("slice.")] == ["accuracy.vs_champion"]


def test_churn_is_reported_and_gated_when_asked(digits_models):
    built, data, _ = digits_models
    reported = _compare(built["strong"], built["strong_other_rows"], data)
    churn = reported.check("churn")
    assert churn.passed and 0 < churn.value < 0.05 and churn.limit is None
    gated = _compare(built["strong"], built["strong_other_rows"], data, max_churn=0.0)
    assert gated.status == "fail" and [c.name for c in gated.failed_checks] == ["churn"]


def test_a_regression_on_one_slice_is_blocked_and_named(digits_models, tmp_path):
    built, data, _split = digits_models
    model = onnx.load(str(built["strong"]))
    bias = next(i for i in model.graph.initializer if i.name == "b")
    values = numpy_helper.to_array(bias).copy()
    values[7] -= 4.0  # the candidate stops recognising sevens: the 'high' slice (5-9) gets worse, 'low' does not
    bias.CopyFrom(numpy_helper.from_array(values, "b"))
    onnx.save(model, str(tmp_path / "no_sevens.onnx"))
    verdict = _compare(tmp_path / "no_sevens.onnx", built["strong"], data)
    failed = {c.name for c in verdict.failed_checks}
    assert "slice.high.accuracy.vs_champion" in failed
    assert not any(name.startswith("slice.low.") for name in failed)
    assert verdict.details["slices"]["worst"]["slice"] == "high"
    assert "worst slice 'high'" in verdict.message


def test_small_slices_are_listed_not_judged(digits_models):
    built, data, _ = digits_models
    verdict = _compare(built["weak"], built["strong"], data, min_slice_size=10_000)
    assert not any(c.name.startswith("slice.") for c in verdict.checks)
    assert [s["judged"] for s in verdict.details["slices"]["slices"]] == [False, False]
    assert verdict.details["slices"]["worst"] is None


@pytest.fixture(scope="module")
def diabetes_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("diabetes")
    split = models.diabetes(seed=1)
    np.savez(root / "eval.npz", x=split.eval_x, labels=split.eval_y)
    built = {name: models.regressor(root / f"{name}.onnx", split, alpha=alpha)
             for name, alpha in (("fitted", 0.01), ("shrunk", 5.0))}
    return built, root / "eval.npz"


@pytest.mark.parametrize(("candidate", "champion", "status"),
                         [("fitted", "shrunk", "pass"), ("shrunk", "fitted", "fail"), ("fitted", None, "pass")],
                         ids=["better", "worse", "no-champion"])
def test_regression_outputs_are_judged_by_mae_and_rmse(diabetes_models, candidate, champion, status):
    built, data = diabetes_models
    verdict = _compare(built[candidate], built.get(champion), data)
    assert verdict.details["task"] == "regression"
    assert verdict.details["metrics"] == ["mae", "rmse"]
    assert verdict.status == status, verdict.message
    if status == "fail":
        assert {c.name for c in verdict.failed_checks} >= {"mae.vs_champion", "rmse.vs_champion"}
        check = verdict.check("mae.vs_champion")  # a larger error, even at the interval's best case
        assert check.value > check.limit


def test_a_candidate_with_nan_outputs_fails_rather_than_errs(diabetes_models, tmp_path):
    built, data = diabetes_models
    broken = models.linear_onnx(tmp_path / "nan.onnx", np.full((10, 1), np.nan), np.zeros(1))
    verdict = _compare(broken, built["fitted"], data)
    assert verdict.status == "fail"
    assert "candidate.outputs_finite" in {c.name for c in verdict.failed_checks}
    assert verdict.to_json()  # no NaN reaches the JSON


def test_labels_from_a_separate_npy(digits_models, tmp_path):
    built, _data, split = digits_models
    np.savez(tmp_path / "inputs.npz", x=split.eval_x)
    np.save(tmp_path / "labels.npy", split.eval_y)
    verdict = _compare(built["weak"], built["strong"], tmp_path / "inputs.npz", labels=tmp_path / "labels.npy")
    assert verdict.status == "fail"
    assert verdict.subject.data["labels"] == sha256_file(tmp_path / "labels.npy")


@pytest.mark.parametrize("case", ["no-labels", "labels-out-of-range", "float-labels-for-classes", "short-labels",
                                  "champion-other-output", "slices-wrong-length"])
def test_bad_input_names_the_field(digits_models, tmp_path, case):
    built, _data, split = digits_models
    arrays = {"x": split.eval_x, "labels": split.eval_y}
    champion = built["strong"]
    field = "labels"
    if case == "no-labels":
        del arrays["labels"]
    elif case == "labels-out-of-range":
        arrays["labels"] = split.eval_y + 5
    elif case == "float-labels-for-classes":
        arrays["labels"] = split.eval_y.astype(np.float32)
    elif case == "short-labels":
        arrays["labels"] = split.eval_y[:10]  # the labels are short, not the inputs
    elif case == "champion-other-output":
        champion = models.linear_onnx(tmp_path / "three.onnx", np.ones((64, 3)), np.zeros(3))
        field = "output"
    else:
        arrays["slices"] = np.zeros(3)
        field = "slices"
    np.savez(tmp_path / "eval.npz", **arrays)
    with pytest.raises(InputError) as caught:
        _compare(built["strong"], champion, tmp_path / "eval.npz")
    assert caught.value.field == field


def test_threshold_specs_are_checked():
    assert parse_thresholds([])["accuracy"] == DEFAULT_THRESHOLDS["accuracy"]
    assert parse_thresholds(["mae:floor=3"])["mae"] == Threshold(floor=3, max_relative_regression=0.02)
    for bad in ("accuracy", "loss:floor=1", "accuracy:ceiling=1", "accuracy:floor=high"):
        with pytest.raises(InputError):
            parse_thresholds([bad])


def test_options_are_checked():
    with pytest.raises(InputError):
        CompareOptions(confidence=1.0).judging()
    with pytest.raises(InputError):
        CompareOptions(resamples=10).judging()
    assert isinstance(CompareOptions().judging(), Judging)


def test_labels_under_another_name(digits_models, tmp_path):
    built, _data, split = digits_models
    np.savez(tmp_path / "eval.npz", x=split.eval_x, y=split.eval_y)
    with pytest.raises(InputError, match=r"eval\.npz: labels: expected a `labels` array of labels .*--labels-key"):
        _compare(built["weak"], built["strong"], tmp_path / "eval.npz")
    champion = _champion(built["strong"])
    verdict = compare(candidate=built["weak"], champion=champion, eval_data=tmp_path / "eval.npz", labels=None,
                      task="auto", output=None, slice_key="slices", max_slices=50, judging=_judging(),
                      labels_key="y")
    assert verdict.status == "fail" and verdict.details["samples"] == len(split.eval_y)


def test_short_labels_in_a_npy_are_blamed_on_the_labels_file(digits_models, tmp_path):
    built, _data, split = digits_models
    np.savez(tmp_path / "inputs.npz", x=split.eval_x)
    np.save(tmp_path / "labels.npy", split.eval_y[:10])
    with pytest.raises(InputError) as caught:
        _compare(built["weak"], built["strong"], tmp_path / "inputs.npz", labels=tmp_path / "labels.npy")
    assert caught.value.source == str(tmp_path / "labels.npy") and caught.value.field is None
    assert f"expected one label per sample: {len(split.eval_x)} labels, as many as the samples of input `x` in " \
           f"inputs.npz, found 10 labels in {tmp_path / 'labels.npy'}" in str(caught.value)
