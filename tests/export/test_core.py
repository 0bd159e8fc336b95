import numpy as np
import pytest

from skewgate.common.compare import batch_sizes
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.tensor_stats import sha256_array
from skewgate.export.core import export_model
from skewgate.export.run import ExportOptions
from tests.export.models import INPUT, examples
from tests.support.rounding_model import OFFSET_SAMPLE, save_offset_model


def _export(pt2_path, npz, tmp_path, **options):
    return export_model(model=pt2_path, inputs=npz, out=tmp_path / "model.onnx", options=ExportOptions(**options))


def _failed(verdict):
    return {c.name for c in verdict.failed_checks}


@pytest.fixture(scope="module")
def good_verdict(pt2, example_npz, tmp_path_factory):
    out = tmp_path_factory.mktemp("good")
    return _export(pt2("good"), example_npz, out), out / "model.onnx"


def test_good_model_passes_every_check(good_verdict):
    verdict, _onnx_path = good_verdict
    assert verdict.status == "pass", verdict.message
    names = {c.name for c in verdict.checks}
    assert {"outputs_match.linear", "dynamic_batch", "batch_invariance.torch", "batch_invariance.onnxruntime",
            "determinism.torch", "determinism.onnxruntime", "inputs_finite", "input_hash_chain",
            "lint.batchnorm_eval_mode", "lint.dropout_inactive", "lint.weights_finite"} <= names


def test_subject_is_the_onnx_file_it_wrote(good_verdict, example_npz):
    verdict, onnx_path = good_verdict
    assert verdict.subject.sha256 == sha256_file(onnx_path)
    assert verdict.subject.data["inputs"] == sha256_file(example_npz)
    assert verdict.subject.source_sha256 is not None


def test_stats_cover_every_stage(good_verdict):
    verdict, _ = good_verdict
    stages = {(s.name, s.stage) for s in verdict.stats}
    assert stages == {(INPUT, "torch.input"), (INPUT, "ort.input"), ("linear", "torch.output"),
                      ("linear", "ort.output")}


def test_hash_chain_records_each_hop_from_the_files_bytes(good_verdict, example_npz):
    """Each hop's digest is that of the examples the file holds (the first `max_samples`), not only equal to the
    other hops: a loader that altered the data before every hop would fail here."""
    chain = good_verdict[0].details["input_hash_chain"]
    with np.load(example_npz) as arrays:
        expected = sha256_array(arrays[INPUT][: ExportOptions().max_samples])
    assert chain["file"] == sha256_file(example_npz)
    assert chain["loaded"][INPUT] == chain["torch_fed"][INPUT] == chain["onnxruntime_fed"][INPUT] == expected


def test_records_erf_gelu(good_verdict):
    assert good_verdict[0].details["gelu_approximations"] == {"none": 1}


def test_records_tanh_gelu(pt2, example_npz, tmp_path):
    verdict = _export(pt2("tanh_gelu"), example_npz, tmp_path)
    assert verdict.details["gelu_approximations"] == {"tanh": 1}
    assert set(verdict.details["onnx_gelu"].values()) == {"tanh"}


def test_batchnorm_left_in_training_mode_fails_with_the_module_named(pt2, example_npz, tmp_path):
    verdict = _export(pt2("train_mode"), example_npz, tmp_path)
    assert verdict.status == "fail"
    failed = _failed(verdict)
    assert {"lint.batchnorm_eval_mode", "lint.dropout_inactive", "outputs_match.linear",
            "determinism.torch"} <= failed
    check = next(c for c in verdict.checks if c.name == "lint.batchnorm_eval_mode")
    assert "bn" in check.detail
    # active dropout draws other masks in float64: no rounding reference, and the verdict says so
    assert "more than rounding" in verdict.details["rounding"]["why"]


@pytest.mark.parametrize(
    ("variant", "check"),
    [
        pytest.param("untouched_bn", "lint.batchnorm_stats_trained", id="bn-stats-never-updated"),
        pytest.param("nan_weight", "lint.weights_finite", id="nan-in-weights"),
        pytest.param("static_batch", "dynamic_batch", id="static-batch-dim"),
    ],
)
def test_lint_and_signature_defects_fail(pt2, example_npz, tmp_path, variant, check):
    if variant == "static_batch":  # a static .pt2 only accepts its traced batch size (4)
        example_npz = tmp_path / "four.npz"
        np.savez(example_npz, **{INPUT: examples(4)})
    verdict = _export(pt2(variant), example_npz, tmp_path)
    assert verdict.status == "fail"
    assert check in _failed(verdict)


def test_nan_in_example_inputs_is_a_failing_check(pt2, tmp_path):
    data = examples(6)
    data[2, 0, 3, 3] = np.nan
    npz = tmp_path / "nan.npz"
    np.savez(npz, **{INPUT: data})
    verdict = _export(pt2("good"), npz, tmp_path)
    assert "inputs_finite" in _failed(verdict)


def test_tolerance_override_loosens_one_output(pt2, example_npz, tmp_path):
    # active dropout makes ORT and PyTorch disagree far beyond the default tolerance (see the test above)
    verdict = _export(pt2("train_mode"), example_npz, tmp_path, tolerances=("linear=1e6,1e6",))
    check = verdict.check("outputs_match.linear")
    assert check.passed
    assert "(rtol 1e+06, atol 1e+06)" in check.detail


def test_zero_tolerance_fails_unless_bit_identical(pt2, example_npz, tmp_path):
    verdict = _export(pt2("good"), example_npz, tmp_path, tolerances=("linear=0,0",))
    check = verdict.check("outputs_match.linear")
    outputs = {s.stage: s.sha256 for s in verdict.stats if s.name == "linear"}
    assert "(rtol 0, atol 0)" in check.detail
    assert check.passed is (outputs["torch.output"] == outputs["ort.output"])


@pytest.mark.parametrize("spec", ["linear=abc", "linear=1e-3", "linear"], ids=["not-numbers", "one-number",
                                                                             "no-values"])
def test_malformed_tolerance_is_bad_input(pt2, example_npz, tmp_path, spec):
    with pytest.raises(InputError, match="OUTPUT=RTOL,ATOL"):
        _export(pt2("good"), example_npz, tmp_path, tolerances=(spec,))


def test_tolerance_for_unknown_output_is_bad_input(pt2, example_npz, tmp_path):
    with pytest.raises(InputError, match="nope"):
        _export(pt2("good"), example_npz, tmp_path, tolerances=("nope=1,1",))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda p: np.savez(p, other=examples(3)), r"x: expected model input", id="missing-input"),
        pytest.param(lambda p: np.savez(p, x=examples(3).astype(np.float64)), "expected dtype float32",
                     id="wrong-dtype"),
        pytest.param(lambda p: np.savez(p, x=examples(3)[:, 0]), "expected rank 4", id="wrong-rank"),
    ],
)
def test_bad_example_inputs_are_input_errors(pt2, tmp_path, make, message):
    npz = tmp_path / "bad.npz"
    make(npz)
    with pytest.raises(InputError, match=message):
        _export(pt2("good"), npz, tmp_path)


@pytest.mark.parametrize(
    ("content", "found"),
    [
        pytest.param(b"garbage", "not a zip archive", id="not-a-zip"),
        pytest.param(None, "a zip archive with no models/<name>.json", id="npz-renamed"),
    ],
)
def test_a_pt2_that_does_not_load_is_an_input_error(example_npz, tmp_path, content, found):
    bad = tmp_path / "model.pt2"
    bad.write_bytes(content if content is not None else example_npz.read_bytes())
    with pytest.raises(InputError, match=found):
        _export(bad, example_npz, tmp_path)


@pytest.mark.parametrize(("n", "sizes"), [(1, [1]), (2, [1, 2]), (12, [1, 7, 12]), (64, [1, 33, 64])])
def test_batch_sizes_are_one_odd_and_largest(n, sizes):
    assert batch_sizes(n) == sizes


def test_an_mlflow_pytorch_model_uri_is_exported_with_a_dynamic_batch(mlflow_db, tmp_path, example_npz, monkeypatch):
    import mlflow
    import torch

    from tests.export.models import SmallNet

    uri = mlflow_db
    # the environment only: mlflow.set_tracking_uri would outlive this test and redirect every later one
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = SmallNet()
    model.train()
    with torch.no_grad():
        model(torch.from_numpy(examples(16, seed=3)))
    model.eval()
    with mlflow.start_run() as run:
        mlflow.pytorch.log_model(model, name="model", serialization_format="pickle")
    with pytest.raises(InputError, match="pass --allow-pickle if you trust that registry"):
        export_model(model=f"runs:/{run.info.run_id}/model", inputs=example_npz, out=tmp_path / "m.onnx")
    verdict = export_model(model=f"runs:/{run.info.run_id}/model", inputs=example_npz, out=tmp_path / "m.onnx",
                           options=ExportOptions(allow_pickle=True))
    assert verdict.status == "pass", verdict.message
    assert verdict.subject.source == f"runs:/{run.info.run_id}/model"


def test_an_mlflow_uri_that_does_not_resolve_is_bad_input(tmp_path, example_npz, monkeypatch, mlflow_db):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    with pytest.raises(InputError, match="expected an MLflow pytorch model URI"):
        export_model(model="runs:/0123456789abcdef/model", inputs=example_npz, out=tmp_path / "m.onnx",
                     options=ExportOptions(allow_pickle=True))


@pytest.mark.parametrize(
    ("first", "extra"),
    [
        pytest.param(OFFSET_SAMPLE, [OFFSET_SAMPLE], id="beyond-the-first-four-grounded-when-it-fails"),
        pytest.param(2, [], id="among-the-first-four"),
    ],
)
def test_a_sample_that_rounds_more_than_the_others_is_grounded_not_failed(tmp_path, first, extra):
    """LR-ASPP's sixth sample rounds 13× as much as its first four; grounded on those four alone, PyTorch failed
    against itself. Wherever that sample sits, the verdict is the same, and it says which samples were grounded."""
    files = save_offset_model(tmp_path, first=first)
    verdict = export_model(model=files["pt2"], inputs=files["inputs"], out=tmp_path / "model.onnx")
    assert verdict.status == "pass", verdict.message
    rounding = verdict.details["rounding"]
    assert rounding["method"] == "float64 reference"
    assert rounding["failed_and_grounded"] == extra
    assert rounding["samples"] == 4 + len(extra)
