import numpy as np
import onnx
import pytest

from skewgate.calibrate.core import CalibrateOptions, calibrate
from skewgate.common.errors import InputError


def run(calib, tmp_path, *, model="none", calibration="calibration", eval_data="eval", **options):
    return calibrate(onnx=calib[model], calibration=calib[calibration], eval_data=calib[eval_data],
                     out=tmp_path / "model.int8.onnx", options=CalibrateOptions(**options))


def test_clean_model_passes_and_is_written_as_qdq(calib, tmp_path):
    result = run(calib, tmp_path)
    assert result.verdict.status == "pass", result.verdict.message
    ops = {n.op_type for n in onnx.load(tmp_path / "model.int8.onnx").graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    assert result.verdict.details["accuracy"]["drop"] <= 0.01
    assert result.verdict.details["excluded_nodes"] == []
    assert result.layers and all(r["sqnr_db"] > 20 for r in result.layers)


def test_outlier_channels_are_equalised_and_int8_keeps_top1(calib, tmp_path):
    result = run(calib, tmp_path, model="outlier_channels")
    assert result.verdict.status == "pass", result.verdict.message
    [record] = result.verdict.details["equalization"]
    assert record["channels_rescaled"] == 3 and record["channel_spread_before"] > 100
    assert record["channel_spread_after"] < 3
    assert result.verdict.check("equalization.fp32_unchanged").passed
    assert result.verdict.details["logits"]["top1_agreement"] >= 0.99


def test_outlier_channels_without_equalisation_miss_the_budget(calib, tmp_path):
    result = run(calib, tmp_path, model="outlier_channels", equalize=False, max_fallback_layers=0)
    assert result.verdict.status == "fail"
    assert result.verdict.details["logits"]["top1_agreement"] < 0.95


@pytest.mark.parametrize("method", ["auto", "minmax", "percentile", "entropy", "mse"])
def test_corrupted_calibration_samples_never_set_a_range(calib, tmp_path, method):
    result = run(calib, tmp_path, calibration="corrupted", method=method, max_fallback_layers=0)
    # as deployed (ORT's fused integer kernels, full 8-bit weights) a few of 397 samples flip; ranges set by the
    # ±1000 samples flip most of them (benchmarks/calibrate_bench.py: 10.8% agreement with ORT's calibrators)
    assert result.verdict.details["logits"]["top1_agreement"] >= 0.98, method
    x = next(t for t in result.tensors if t["tensor"] == "x")
    assert x["set_aside_samples"] == [10, 60] and x["outlier"] and x["high"] < 10
    assert x["extreme_samples"][:2] == [10, 60]
    assert "x (max/p99.99" in result.verdict.check("outliers").detail


def test_budget_loop_keeps_the_fragile_layer_in_fp32(calib, tmp_path):
    result = run(calib, tmp_path, model="fragile_weights", eval_data="eval_fragile")
    trials = result.trials
    assert trials[0]["drop"] > 0.01 and trials[0]["excluded"] == []
    # the conv with the crushed weights is the first layer the layerwise evidence points at
    assert next(t["excluded"] for t in trials if t["excluded"]) == ["node_conv2d_1"]
    assert result.verdict.check("accuracy_drop").passed, result.verdict.message
    assert trials[-1]["drop"] <= 0.01 + 1e-9 and result.verdict.details["excluded_nodes"] == trials[-1]["excluded"]
    assert "node_conv2d_1" in trials[-1]["excluded"]
    # what stayed FP32 is counted: the two big convs are most of the MACs, so coverage warns
    coverage = result.verdict.check("int8_coverage")
    assert coverage.value == result.verdict.details["int8_coverage"]["mac_share"] < 0.8
    assert not coverage.passed and result.verdict.status == "warn" and "FP32: Conv" in coverage.detail
    written = onnx.load(tmp_path / "model.int8.onnx")
    conv = next(n for n in written.graph.node if n.name == "node_conv2d_1")
    assert not any(i.endswith("_DequantizeLinear_Output") for i in conv.input[1:])  # FP32 weights
    tags = result.verdict.registry_tags
    assert tags["skewgate.calibrate.excluded_nodes"] == ",".join(trials[-1]["excluded"])


def test_budget_never_met_fails_and_still_writes_the_best_model(calib, tmp_path):
    result = run(calib, tmp_path, model="very_fragile_weights", eval_data="eval_very_fragile",
                 max_accuracy_drop=0.005)
    assert result.verdict.status == "fail"
    assert not result.verdict.check("accuracy_drop").passed
    drops = [t["drop"] for t in result.trials]
    assert len(drops) >= 2 and min(drops) < drops[0] and min(drops) > 0.005
    best = min(result.trials, key=lambda t: t["drop"])
    assert result.verdict.details["excluded_nodes"] == best["excluded"]
    assert result.verdict.details["reduce_range"] == best["reduce_range"]
    assert ["node_conv2d_1"] in [t["excluded"] for t in result.trials]
    assert "tried: " in result.verdict.check("accuracy_drop").detail
    assert result.verdict.details["accuracy"]["drop"] == best["drop"]  # the written model is the best one
    assert (tmp_path / "model.int8.onnx").is_file()


def test_eval_data_beyond_the_calibration_set_is_a_coverage_finding(calib, tmp_path):
    wide = tmp_path / "wide.npz"
    arrays = np.load(calib["eval"])
    np.savez(wide, x=arrays["x"] * 3, labels=arrays["labels"])
    result = calibrate(onnx=calib["none"], calibration=calib["calibration"], eval_data=wide,
                       out=tmp_path / "m.onnx", options=CalibrateOptions(max_accuracy_drop=1.0, min_top1_agreement=0.0))
    coverage = result.verdict.check("coverage")
    assert not coverage.passed and coverage.severity == "warn" and result.verdict.status == "warn"


def _row(name, excess, *, quantized):
    return {"tensor": name, "uncovered_excess": excess, "eval_outside": 0.05 + excess, "clipped": 0.05,
            "quantized": quantized}


@pytest.mark.parametrize(("rows", "passed"), [
    pytest.param([_row("q", 0.0099, quantized=True)], True, id="just-inside"),
    pytest.param([_row("q", 0.0101, quantized=True)], False, id="just-outside"),
    # a Gelu's output feeding a MaxPool stays float in the INT8 model: its range is never applied
    pytest.param([_row("q", 0.0, quantized=True), _row("gelu_1", 0.5, quantized=False)], True,
                 id="a-float-tensor-is-not-judged"),
    pytest.param([_row("gelu_1", 0.0, quantized=False)], False, id="nothing-quantized-is-not-a-pass"),
])
def test_coverage_judges_the_tensors_the_int8_model_quantizes(rows, passed):
    from skewgate.calibrate.core import coverage_check

    check = coverage_check(rows, 0.01)
    assert (check.passed, check.severity) == (passed, "warn")
    if rows[0]["quantized"]:
        assert check.value == max(r["uncovered_excess"] for r in rows if r["quantized"])


def test_the_quantized_tensors_are_the_quantize_linear_inputs_of_the_written_model(calib, tmp_path):
    from skewgate.calibrate.core import quantized_tensors

    result = calibrate(onnx=calib["none"], calibration=calib["calibration"], eval_data=calib["eval"],
                       out=tmp_path / "m.onnx", options=CalibrateOptions(max_accuracy_drop=1.0))
    written = onnx.load(tmp_path / "m.onnx")
    found = quantized_tensors(written)
    assert found and not any(name.endswith("_QuantizeLinear_Input") for name in found)
    assert {t["tensor"] for t in result.tensors if t["quantized"]} <= found
    produced = {o for n in written.graph.node for o in n.output} | {i.name for i in written.graph.input}
    assert all(name in produced or f"{name}_QuantizeLinear_Input" in produced for name in found)


def test_too_few_calibration_samples(calib, tmp_path):
    small = tmp_path / "small.npz"
    np.savez(small, x=np.load(calib["calibration"])["x"][:8])
    with pytest.raises(InputError, match=r"small.npz: expected at least 32 calibration samples, found 8"):
        calibrate(onnx=calib["none"], calibration=small, eval_data=calib["eval"], out=tmp_path / "m.onnx")


def test_calibration_inputs_must_match_the_model(calib, tmp_path):
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, pixels=np.load(calib["calibration"])["x"])
    with pytest.raises(InputError, match=r"wrong.npz: x: expected model input float32\[N, 1, 8, 8\]"):
        calibrate(onnx=calib["none"], calibration=wrong, eval_data=calib["eval"], out=tmp_path / "m.onnx")


def test_labels_must_match_the_eval_set(calib, tmp_path):
    labels = tmp_path / "labels.npy"
    np.save(labels, np.zeros(3, np.int64))
    with pytest.raises(InputError, match=r"labels.npy: labels: expected integer class indices for 397 eval samples"):
        calibrate(onnx=calib["none"], calibration=calib["calibration"], eval_data=calib["eval"],
                  out=tmp_path / "m.onnx", labels=labels)


def test_labels_may_come_in_an_npz_under_their_name(calib, tmp_path):
    archive = tmp_path / "labels.npz"
    np.savez(archive, labels=np.zeros(3, np.int64))
    with pytest.raises(InputError, match=r"labels.npz: labels: expected integer class indices for 397 eval samples"):
        calibrate(onnx=calib["none"], calibration=calib["calibration"], eval_data=calib["eval"],
                  out=tmp_path / "m.onnx", labels=archive)
    np.savez(archive, y=np.zeros(397, np.int64))
    with pytest.raises(InputError, match=r"labels.npz: expected .* an .npz with a 'labels' array, found an .npz of "
                                         r"\['y'\]"):
        calibrate(onnx=calib["none"], calibration=calib["calibration"], eval_data=calib["eval"],
                  out=tmp_path / "m.onnx", labels=archive)


def test_model_without_quantisable_op(tmp_path, calib):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu-only",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "relu.onnx")
    with pytest.raises(InputError, match=r"relu.onnx: expected at least one quantisable op .* found op types"):
        calibrate(onnx=tmp_path / "relu.onnx", calibration=calib["calibration"], eval_data=calib["eval"],
                  out=tmp_path / "m.onnx")


def _masked_classifier(path):
    """x → MatMul → + mask (−inf where `pad`, built in the graph as a padding mask is) → Softmax → MatMul."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
               for n, s in (("w1", (8, 6)), ("w2", (6, 3)))]
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("minus_inf", -np.inf),
                                                                                  ("zero", 0.0))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["scores"], name="scores"),
             helper.make_node("Where", ["pad", "minus_inf", "zero"], ["mask"], name="mask"),
             helper.make_node("Add", ["scores", "mask"], ["masked"], name="masked"),
             helper.make_node("Softmax", ["masked"], ["weights"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["weights", "w2"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "masked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
                                                helper.make_tensor_value_info("pad", TensorProto.BOOL, ["N", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              initializer=[*weights, *constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    x = rng.normal(size=(256, 8)).astype(np.float32)
    pad = np.zeros((256, 6), bool)
    pad[:, 4:] = True  # the last two positions are padding in every sample
    return {"x": x, "pad": pad}


def test_a_tensor_holding_minus_inf_is_never_quantised(tmp_path):
    """A padding mask has no INT8 range (quantised, −inf would clamp to a small finite value: no mask). The
    nodes reading or writing it stay FP32, say so, and the written model still masks."""
    import onnxruntime as ort

    feeds = _masked_classifier(tmp_path / "masked.onnx")
    np.savez(tmp_path / "data.npz", **feeds)
    result = calibrate(onnx=tmp_path / "masked.onnx", calibration=tmp_path / "data.npz",
                       eval_data=tmp_path / "data.npz", out=tmp_path / "masked.int8.onnx")
    assert result.verdict.status == "pass", result.verdict.message
    # the mask, the masked scores and the softmax reading them (both hold −inf)
    assert result.verdict.details["non_finite_fp32"] == {"mask": "mask", "masked": "mask", "softmax": "masked"}
    assert "masked (mask)" in result.verdict.check("non_finite").detail
    written = onnx.load(tmp_path / "masked.int8.onnx")
    assert next(n for n in written.graph.node if n.name == "masked").input[1] == "mask"  # no Q/DQ on the mask
    # as deployed, the padded positions still weigh nothing: INT8 agrees with FP32 on what masking decides
    fp32, int8 = (ort.InferenceSession(str(tmp_path / f), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
                  for f in ("masked.onnx", "masked.int8.onnx"))
    assert np.abs(int8 - fp32).max() < 0.1 * np.abs(fp32).max()


def test_a_model_without_infinities_says_nothing_about_them(calib, tmp_path):
    result = run(calib, tmp_path)
    assert "non_finite_fp32" not in result.verdict.details
    assert all(c.name != "non_finite" for c in result.verdict.checks)
