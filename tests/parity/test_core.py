"""Planted defects must be localised to the right module; the clean model passes."""

import json

import numpy as np
import onnx
import pytest

from skewgate.common.compare import Tolerance
from skewgate.common.error_stats import RunningError
from skewgate.common.errors import BackendError, InputError
from skewgate.common.layers import OnnxValue
from skewgate.common.processes import free_port
from skewgate.export.core import export_model
from skewgate.parity.core import ParityOptions, _int8_checks, first_divergence, parity
from tests.parity.models import plant, quantize
from tests.support.rounding_model import OFFSET_SAMPLE, save_offset_model, shift_first_row

LAYERWISE = ParityOptions(layerwise=True, batch_size=16)


def _run(model, onnx_path, **kwargs):
    return parity(torch_model=model["pt2"], onnx=onnx_path, inputs=model["inputs"], options=LAYERWISE, **kwargs)


def _first(result, pair="torch_vs_fp32"):
    return result.verdict.details[pair]["first_divergence"]


def test_clean_model_passes_with_full_coverage(parity_model):
    result = _run(parity_model, parity_model["onnx"])
    assert result.verdict.status == "pass", result.verdict.message
    coverage = result.verdict.details["torch_vs_fp32"]["coverage"]
    assert coverage["matched"] >= 6
    # Conv folded into the following BatchNorm: reported as removed by graph optimisation, never skipped silently
    assert "conv2d" in coverage["removed_by_optimisation"]
    by_value = {row["value"]: row for row in result.layers["torch_vs_fp32"]}
    assert by_value["gelu"]["torch_node"] == "gelu"  # same name on both sides
    assert any(row["module"] == "blocks.0.bn" and row["torch_node"] == "batch_norm" for row in by_value.values())
    assert [row["depth"] for row in result.layers["torch_vs_fp32"]] == sorted(
        row["depth"] for row in result.layers["torch_vs_fp32"])


@pytest.mark.parametrize(
    ("defect", "module", "op", "introduced"),
    [
        pytest.param("tanh_gelu", "blocks.0.act", "Gelu", True, id="gelu-switched-to-tanh"),
        pytest.param("bn_statistics", "blocks.2.bn", "Conv", True, id="batchnorm-statistics-differ"),
        pytest.param("corrupted_weight", "blocks.1.conv", "Conv", True, id="one-corrupted-weight"),
    ],
)
def test_planted_defects_are_localised(parity_model, tmp_path, defect, module, op, introduced):
    result = _run(parity_model, plant(parity_model["onnx"], tmp_path / f"{defect}.onnx", defect))
    assert result.verdict.status == "fail"
    first = _first(result)
    assert (first["module"], first["op"]) == (module, op)
    assert ("introduced here" in first["isolated"]) is introduced
    failed = {c.name: c.detail for c in result.verdict.failed_checks}
    assert module in failed["layers.torch_vs_fp32"]
    # labelled by the module that made the value and its class, whatever the ONNX op (a Conv with BN folded in)
    module_type = {"act": "GELU", "bn": "BatchNorm2d", "conv": "Conv2d"}[module.rsplit(".", 1)[1]]
    assert first["module_type"] == module_type
    assert f"{module} ({module_type})" in failed["layers.torch_vs_fp32"]


def test_int8_with_one_badly_calibrated_layer_is_localised(parity_model, tmp_path):
    good = quantize(parity_model["onnx"], tmp_path / "good.int8.onnx", parity_model["inputs"])
    clean = _run(parity_model, parity_model["onnx"], int8=good)
    assert clean.verdict.status == "pass", clean.verdict.message
    (judged,) = clean.verdict.details["int8_agreement"].values()  # the one output, by its name
    assert judged["top1_agreement"] >= 0.95 and judged["task"] == "classification"
    broken = quantize(parity_model["onnx"], tmp_path / "bad.int8.onnx", parity_model["inputs"], break_value="relu")
    result = _run(parity_model, parity_model["onnx"], int8=broken)
    assert result.verdict.status == "fail"
    first = _first(result, "fp32_vs_int8")
    assert (first["value"], first["module"]) == ("relu", "blocks.1.act")
    assert first["sqnr_db"] < 20


def test_final_outputs_only_without_layerwise(parity_model, tmp_path):
    result = parity(torch_model=parity_model["pt2"], onnx=plant(parity_model["onnx"], tmp_path / "t.onnx", "tanh_gelu"),
                    inputs=parity_model["inputs"])
    assert result.layers == {}
    assert "outputs_match.linear" in {c.name for c in result.verdict.failed_checks}


def _rename_input(source, target):
    model = onnx.load(str(source))
    model.graph.input[0].name = "pixels"
    for node in model.graph.node:
        node.input[:] = ["pixels" if i == "x" else i for i in node.input]
    onnx.save(model, str(target))
    return target


def _extra_output(source, target):
    model = onnx.load(str(source))
    model.graph.output.append(onnx.helper.make_tensor_value_info("view", onnx.TensorProto.FLOAT, ["batch", 512]))
    onnx.save(model, str(target))
    return target


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(_rename_input, r"inputs: expected the PyTorch program's inputs \['x'\], found \['pixels'\]",
                     id="different-input-names"),
        pytest.param(_extra_output, "outputs: expected 1 outputs like the PyTorch program, found 2",
                     id="different-output-counts"),
    ],
)
def test_mismatched_models_are_input_errors(parity_model, tmp_path, make, message):
    with pytest.raises(InputError, match=message):
        _run(parity_model, make(parity_model["onnx"], tmp_path / "m.onnx"))


def test_inputs_that_do_not_match_are_input_errors(parity_model, tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 1, 8, 9), np.float32))
    with pytest.raises(InputError, match=r"bad\.npz: x: expected float32\[N, 1, 8, 8\]"):
        parity(torch_model=parity_model["pt2"], onnx=parity_model["onnx"], inputs=tmp_path / "bad.npz")


def test_triton_that_is_down_is_a_backend_error_at_the_deadline(parity_model):
    with pytest.raises(BackendError, match=r"live failed for 2s"):
        parity(torch_model=parity_model["pt2"], onnx=parity_model["onnx"], inputs=parity_model["inputs"],
               triton_url=f"127.0.0.1:{free_port()}", triton_model="m", options=ParityOptions(triton_deadline_s=2.0))


def test_first_divergence_skips_errors_inherited_from_upstream():
    values = {name: OnnxValue(name, f"n_{name}", "Op", f"m.{name}", (src,), depth)
              for depth, (name, src) in enumerate([("a", "x"), ("b", "a"), ("c", "b")])}

    def error(bad):
        err = RunningError(tolerance=__import__("skewgate.common.compare", fromlist=["Tolerance"]).Tolerance(0, 0))
        err.count, err.worst_ratio = 1, (5.0 if bad else 0.0)
        return err

    errors = {"a": error(False), "b": error(True), "c": error(True)}
    assert first_divergence(values, errors, lambda e: not e.ok) == "b"
    # with "b" unmatched, "c" inherits from "a" (clean), so "c" is where it starts
    assert first_divergence(values, {"a": error(False), "c": error(True)}, lambda e: not e.ok) == "c"
    assert first_divergence(values, {"a": error(False)}, lambda e: not e.ok) is None


@pytest.mark.parametrize(("bad", "first"), [
    pytest.param("bcde", "b", id="keeps-diverging"),
    pytest.param("bde", "b", id="comes-back-then-diverges-again"),
    pytest.param("de", "d", id="diverges-late"),
    pytest.param("", None, id="never"),
])
def test_first_divergence_is_the_earliest_even_when_values_come_back_within_bounds(bad, first):
    """A chain a → b → c → d → e where `bad` values are out of bounds: a value that comes back within bounds
    (c, after a ReLU clamps the error away) does not move the first divergence to where it diverges again."""
    from skewgate.common.compare import Tolerance

    chain = [("a", "x"), ("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")]
    values = {name: OnnxValue(name, f"n_{name}", "Op", f"m.{name}", (src,), depth)
              for depth, (name, src) in enumerate(chain)}
    errors = {}
    for name, _ in chain:
        errors[name] = RunningError(tolerance=Tolerance(0, 0))
        errors[name].count, errors[name].worst_ratio = 1, (5.0 if name in bad else 0.5)
    assert first_divergence(values, errors, lambda e: not e.ok) == first


def int8_checks(reference, candidate, **options):
    """`_int8_checks` on outputs (one array: the output `out`; else name → array) held in two batches, as parity
    streams them; the figures of `out` when it is the only one."""
    single = not isinstance(reference, dict)
    references, candidates = ({"out": reference}, {"out": candidate}) if single else (reference, candidate)
    errors = {}
    for name in references:
        errors[name] = RunningError(Tolerance(0.0, 0.0))
        errors[name].update(candidates[name], references[name], np.random.default_rng(0))
    kept = {"fp32": {n: [r[:1], r[1:]] for n, r in references.items()},
            "int8": {n: [c[:1], c[1:]] for n, c in candidates.items()}}
    checks, figures = _int8_checks(errors, kept, ParityOptions(**options), probabilities=set())
    return {c.name: c for c in checks}, figures["out"] if single else figures


def test_int8_segmentation_is_judged_per_pixel_over_axis_1():
    logits = np.random.default_rng(0).normal(size=(2, 5, 4, 6)).astype(np.float32)
    changed = logits.copy()
    changed[0, :, 0, 0] = -changed[0, :, 0, 0]  # one pixel's argmax moves
    checks, figures = int8_checks(logits, changed, min_top1_agreement=0.98)
    assert (figures["task"], figures["class_axis"]) == ("segmentation", 1)
    check = checks["int8.top1_agreement.out"]
    assert check.value == pytest.approx(47 / 48) and not check.passed
    assert "47 of 48 positions kept" in check.detail and figures["miou"] < 1
    assert int8_checks(logits, changed, min_top1_agreement=0.97)[0]["int8.top1_agreement.out"].passed


def test_int8_regression_declared_is_judged_by_its_error_and_has_no_kl():
    values = np.linspace(0, 1, 64, dtype=np.float32).reshape(32, 2)
    checks, figures = int8_checks(values, values + np.float32(0.001), task="regression")
    assert figures["task"] == "regression" and checks["int8.error_agreement.out"].passed
    assert not any(name.startswith(("int8.kl_divergence", "int8.top1_agreement")) for name in checks)
    worse, _ = int8_checks(values, values + np.float32(0.1), task="regression")
    assert not worse["int8.error_agreement.out"].passed  # 0.1 is 34% of the spread (0.29)


def _two_heads(harm_boxes: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A classifier's logits beside a box regressor's four values, and an INT8 side whose boxes moved by
    `harm_boxes` of their spread on the first 8 of 64 samples (the logits untouched)."""
    rng = np.random.default_rng(1)
    reference = {"logits": rng.normal(size=(64, 10)).astype(np.float32),
                 "boxes": rng.normal(size=(64, 4)).astype(np.float32)}
    boxes = reference["boxes"].copy()
    boxes[:8] += np.float32(harm_boxes) * reference["boxes"].std(axis=0)
    return reference, {"logits": reference["logits"].copy(), "boxes": boxes}


def test_int8_judges_every_output_so_harm_to_the_second_head_is_caught():
    """Before, only the first output was judged: INT8 that moved a box head's values by a third of their spread
    passed parity's agreement (calibrate, which judges every output, failed it)."""
    reference, candidate = _two_heads(0.3)
    checks, figures = int8_checks(reference, candidate, output_tasks={"boxes": "regression"})
    assert checks["int8.top1_agreement.logits"].passed
    assert not checks["int8.error_agreement.boxes"].passed
    assert checks["int8.error_agreement.boxes"].value == pytest.approx(56 / 64)
    assert (figures["boxes"]["task"], figures["boxes"]["why"]) == ("regression", "declared for boxes")
    fine, _ = int8_checks(*_two_heads(0.04), output_tasks={"boxes": "regression"})  # within 0.05 of the spread
    assert fine["int8.error_agreement.boxes"].passed


def test_an_output_task_for_an_output_the_model_lacks_is_an_error_naming_the_outputs():
    with pytest.raises(InputError, match=r"output_tasks: expected outputs of the model \(logits, boxes\), found 'box'"):
        int8_checks(*_two_heads(0.0), output_tasks={"box": "regression"})


@pytest.mark.parametrize("options", [pytest.param({"task": "regresion"}, id="task"),
                                     pytest.param({"output_tasks": {"out": "segmentaton"}}, id="output-task"),
                                     pytest.param({"triton_serves": "fp8"}, id="triton-serves")])
def test_a_mistyped_judging_option_is_an_error_without_int8_or_triton_too(parity_model, options):
    """Without --int8 (or a Triton) nothing would read it: it is refused all the same, before anything runs."""
    with pytest.raises(InputError, match=r"task|triton_serves: expected one of"):
        parity(torch_model=parity_model["pt2"], onnx=parity_model["onnx"], inputs=parity_model["inputs"],
               options=ParityOptions(**options))


def test_error_reservoir_is_bounded():
    from skewgate.common.compare import Tolerance
    from skewgate.common.error_stats import RESERVOIR

    err = RunningError(Tolerance(0, 0))
    rng = np.random.default_rng(0)
    for _ in range(5):
        err.update(np.ones(10_000), np.zeros(10_000), rng)
    assert sum(s.size for s in err.sample) == RESERVOIR
    assert err.count == 50_000 and err.max_abs == 1.0


@pytest.fixture(scope="module")
def offset_model(tmp_path_factory):
    """A model whose sample `OFFSET_SAMPLE` rounds ~1000× as much as the first four, exported by skewgate."""
    directory = tmp_path_factory.mktemp("offset")
    files = save_offset_model(directory)
    verdict = export_model(model=files["pt2"], inputs=files["inputs"], out=directory / "offset.onnx")
    assert verdict.status == "pass", verdict.message
    return {**files, "onnx": directory / "offset.onnx"}


def test_a_sample_that_rounds_more_than_the_first_few_is_grounded_not_failed(offset_model):
    result = _run(offset_model, offset_model["onnx"])
    assert result.verdict.status == "pass", result.verdict.message
    for summary in result.verdict.details["rounding"].values():
        assert summary["failed_and_grounded"] == [OFFSET_SAMPLE]


@pytest.mark.parametrize("shift", [pytest.param(2e-7, id="shift-2e-7"), pytest.param(2e-6, id="shift-2e-6")])
def test_a_defect_on_that_sample_alone_still_fails_with_its_own_rounding_measured(offset_model, tmp_path, shift):
    """Grounding the failing sample never excuses a defect: it fails again with its own rounding, and the
    verdict names it as grounded."""
    planted = shift_first_row(offset_model["onnx"], tmp_path / "shifted.onnx", shift)
    result = _run(offset_model, planted)
    assert result.verdict.status == "fail"
    assert "outputs_match.linear_1" in {c.name for c in result.verdict.failed_checks}
    assert result.verdict.details["rounding"]["outputs"]["failed_and_grounded"] == [OFFSET_SAMPLE]


@pytest.mark.parametrize(("limit", "passes"), [pytest.param(0.5, True, id="limit-0.5"),
                                               pytest.param(1.0, None, id="limit-1.0")])
def test_the_int8_agreement_limit_is_stated_on_the_command_line(parity_model, tmp_path, limit, passes):
    """parity --int8 judges the same top-1 agreement as calibrate, with a limit the user states; the verdict
    says what its sample count can resolve."""
    from skewgate.cli import main

    int8 = quantize(parity_model["onnx"], tmp_path / "q.int8.onnx", parity_model["inputs"])
    code = main(["parity", "--torch", str(parity_model["pt2"]), "--onnx", str(parity_model["onnx"]),
                 "--int8", str(int8), "--inputs", str(parity_model["inputs"]), "--min-top1-agreement", str(limit),
                 "--report", str(tmp_path / "p.json")])
    check = next(c for c in json.loads((tmp_path / "p.json").read_text())["checks"]
                 if c["name"].startswith("int8.top1_agreement."))
    assert check["limit"] == limit
    assert check["passed"] == (check["value"] >= limit)
    if passes:
        assert check["passed"] and code == 0
    assert "40 samples resolve a change of 7.22%" in check["detail"]
