"""calibrate on every zoo architecture: the verdict's figures are those of the file it wrote, as deployed — an
independent plain ONNX Runtime evaluation of `--out` gives the same numbers — and its INT8 coverage is honest."""

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from skewgate.calibrate.core import CalibrateOptions, calibrate
from skewgate.common.io import sha256_file
from tests import zoo

NAMES = list(zoo.ZOO)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each zoo model exported, its eval set (the zoo's .npz, with labels) and a calibration set of other draws."""
    root = tmp_path_factory.mktemp("calibrate-zoo")
    found = {}
    for name in NAMES:
        files = zoo.save(name, root, samples=200)
        rng = np.random.default_rng(1)
        calibration = root / f"{name}.calibration.npz"
        np.savez(calibration, **{arg: sample(rng, 64) for arg, sample in zoo.ZOO[name].inputs.items()})
        found[name] = (zoo.export(files), calibration, files.inputs)
    return found


def plain_ort(path, arrays):
    """What a user would run: one default session on the file, every output."""
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, arrays)


def kl(p_ref, p_cand, *, probabilities):
    def norm(x):
        x = x.astype(np.float64)
        if probabilities:
            return x / x.sum(-1, keepdims=True)
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p, q = norm(p_ref), norm(p_cand)
    return float(np.mean(np.sum(p * (np.log(p + 1e-12) - np.log(q + 1e-12)), axis=-1)))


@pytest.mark.parametrize("name", NAMES)
def test_verdict_agrees_with_plain_ort_on_the_written_file(exported, tmp_path, name):
    model, calibration, eval_data = exported[name]
    out = tmp_path / "model.int8.onnx"
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=out,
                       options=CalibrateOptions(max_fallback_layers=3))
    details = result.verdict.details
    assert details["int8"]["sha256"] == sha256_file(out)
    arrays = dict(np.load(eval_data))
    labels = arrays.pop("labels")
    fp32, int8 = plain_ort(model, arrays), plain_ort(out, arrays)
    accuracy_fp32, accuracy_int8 = (float(np.mean(o[0].argmax(-1) == labels)) for o in (fp32, int8))
    assert details["accuracy"]["fp32"] == accuracy_fp32
    assert details["accuracy"]["int8"] == accuracy_int8
    assert details["accuracy"]["drop"] == pytest.approx(accuracy_fp32 - accuracy_int8, abs=1e-12)
    assert result.verdict.check("accuracy_drop").passed == (accuracy_fp32 - accuracy_int8 <= 0.01 + 1e-9)
    assert details["logits"]["top1_agreement"] == float(np.mean(fp32[0].argmax(-1) == int8[0].argmax(-1)))
    softmax_out = name == "softmax_head"
    assert details["logits"]["kl_divergence"] == pytest.approx(kl(fp32[0], int8[0], probabilities=softmax_out),
                                                               rel=1e-6, abs=1e-9)


def test_budget_loop_fixes_what_only_the_deployed_graph_shows(exported, tmp_path):
    """The transformer: the exposed (unfused) graph loses little, the deployed one much more — the loop's
    evidence for the integer kernels; it meets a 5-point budget on the deployed file and says what it kept."""
    model, calibration, eval_data = exported["transformer"]
    out = tmp_path / "t.int8.onnx"
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=out,
                       options=CalibrateOptions(max_accuracy_drop=0.05, min_top1_agreement=0.95,
                                                max_fallback_layers=4))
    trials, details = result.trials, result.verdict.details
    if details["judged_on"]["vnni"] is not False:  # True, or None: flags unknown (not x86, no /proc/cpuinfo)
        pytest.skip("the deployed-only damage here is int16 saturation in ORT's u8×s8 kernels on x86 CPUs without "
                    f"VNNI; judged on {dict(details['judged_on'])}")
    assert trials[0]["drop"] > 0.05 > details["unfused_drop"]["first"]  # only the deployed graph shows it
    assert result.verdict.status in ("pass", "warn"), result.verdict.message
    assert result.verdict.check("accuracy_drop").passed
    arrays = dict(np.load(eval_data))
    labels = arrays.pop("labels")
    assert float(np.mean(plain_ort(out, arrays)[0].argmax(-1) == labels)) == details["accuracy"]["int8"]
    assert details["reduce_range"] or details["excluded_nodes"]


@pytest.mark.parametrize("unfused_drop, kernels_add_error", [(None, None), (0.0, True), (1.0, False)],
                         ids=["as-measured", "kernels-add-error", "kernels-add-none"])
def test_missed_budget_names_what_it_tried(exported, tmp_path, monkeypatch, unfused_drop, kernels_add_error):
    """7-bit weights are tried, first, exactly when the deployed drop exceeds the unfused graph's (fallback.py):
    the verdict records both, so the expectation is read from it — as measured, the gap depends on the CPU (ORT's
    u8×s8 kernels saturate in int16 on x86 without VNNI, not with it). The other two cases set the unfused
    graph's drop (0: the fused kernels add all of the damage; 1: none of it), so both branches run on any CPU."""
    from skewgate.calibrate import core

    if unfused_drop is not None:
        measured = core.layerwise
        monkeypatch.setattr(core, "layerwise",
                            lambda *args, **kwargs: dataclasses.replace(measured(*args, **kwargs), drop=unfused_drop))
    model, calibration, eval_data = exported["transformer"]
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=tmp_path / "t.onnx",
                       options=CalibrateOptions(max_accuracy_drop=0.0, max_fallback_layers=2))
    check, details = result.verdict.check("accuracy_drop"), result.verdict.details
    assert result.verdict.status == "fail" and not check.passed
    assert "; tried: " in check.detail and len(result.trials) >= 3
    fused_gap = details["trials"][0]["drop"] - details["unfused_drop"]["first"]
    if kernels_add_error is not None:
        assert (fused_gap > 0) is kernels_add_error
    tried = [t["tried"] for t in details["trials"][1:]]
    if fused_gap > 0:
        assert tried[0].startswith("7-bit weights (") and "tried: 7-bit weights (" in check.detail, tried
    else:
        assert not any("7-bit weights" in t for t in tried) and "7-bit" not in check.detail, tried
        assert not details["reduce_range"]


def test_lstm_coverage_says_only_the_head_is_int8(exported, tmp_path):
    model, calibration, eval_data = exported["lstm"]
    out = tmp_path / "lstm.int8.onnx"
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=out)
    check = result.verdict.check("int8_coverage")
    assert check.severity == "warn" and not check.passed and result.verdict.status in ("warn", "fail")
    coverage = result.verdict.details["int8_coverage"]
    assert coverage["mac_share"] < 0.01 and coverage["op_types"]["LSTM"] == {"fp32": 2}
    assert coverage["op_types"]["Gemm"] == {"int8": 1}
    assert "FP32: LSTM 99.9% of MACs (2 node(s))" in check.detail
    # the LSTMs are unquantised in the written file: their weights are no DequantizeLinear output
    graph = onnx.load(out).graph
    dequantized = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    assert all(i not in dequantized for n in graph.node if n.op_type == "LSTM" for i in n.input)


@pytest.mark.parametrize("name", ["channels_last", "token_ids"])
def test_fully_quantised_models_pass_the_coverage_check(exported, tmp_path, name):
    model, calibration, eval_data = exported[name]
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=tmp_path / "m.onnx",
                       options=CalibrateOptions(max_accuracy_drop=1.0, min_top1_agreement=0.0))
    check = result.verdict.check("int8_coverage")
    assert check.passed and check.value == pytest.approx(1.0), check.detail


def test_coverage_limit_is_an_option(exported, tmp_path):
    model, calibration, eval_data = exported["lstm"]
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=tmp_path / "m.onnx",
                       options=CalibrateOptions(min_int8_mac_share=0.0))
    assert result.verdict.check("int8_coverage").passed


def test_the_causal_mask_stays_fp32_and_the_transformer_loses_less(exported, tmp_path, monkeypatch):
    """The exported −inf mask is float32's minimum: calibrated like any tensor, it sets a scale of ~1e36 that
    rounds every attention score to 0. Side by side with that (the threshold moved out of reach), keeping the
    mask's nodes in FP32 loses fewer points."""
    from skewgate.calibrate.int8 import collect

    model, calibration, eval_data = exported["causal_transformer"]
    result = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=tmp_path / "m.int8.onnx")
    ops = {n.name: n.op_type for n in onnx.load(str(model)).graph.node}
    kept = result.verdict.details["non_finite_fp32"]
    assert sorted(ops[node] for node in kept) == ["Add", "Add", "Softmax", "Softmax", "Where", "Where"]
    monkeypatch.setattr(collect, "INFINITE", np.inf)
    quantised = calibrate(onnx=model, calibration=calibration, eval_data=eval_data, out=tmp_path / "q.int8.onnx")
    assert "non_finite_fp32" not in quantised.verdict.details
    assert result.verdict.details["accuracy"]["drop"] < quantised.verdict.details["accuracy"]["drop"]
