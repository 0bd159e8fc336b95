"""The verdict's figures from final outputs: which outputs are scored how."""

import numpy as np
import onnx
import pytest

from skewgate.calibrate.int8 import evaluate
from skewgate.calibrate.int8.evaluate import Fp32Side, Reference, compare, judge, layerwise, reference
from skewgate.calibrate.int8.quantize import quantize
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.output_tasks import resolve
from tests.calibrate import models


def reference_of(names, outputs, labels=None, labelled=None):
    specs = {n: resolve(o) for n, o in zip(names, outputs, strict=True)}
    return Reference(names, outputs, frozenset(), labels, labelled, specs)


def test_labels_score_the_first_classifier_output_and_disagreement_takes_the_worst():
    logits = np.array([[3.0, 0.0], [0.0, 3.0], [3.0, 0.0], [0.0, 3.0]])
    other = np.array([[1.0, 0.0, 0.0]] * 4)  # rows of unit norm, but one-hot: `auto` reads an embedding
    regression = np.arange(4.0).reshape(4, 1)
    ref = reference_of(["reg", "a", "b"], [regression, logits, other])
    flipped = logits.copy()
    flipped[0] = [0.0, 3.0]
    other_flipped = other.copy()
    other_flipped[:2] = [0.0, 1.0, 0.0]
    result = compare(ref, {"reg": regression + 0.01, "a": flipped, "b": other_flipped})
    assert [ref.specs[n].task for n in ref.names] == ["regression", "classification", "embedding"]
    assert result.drop == 0.5  # output b: 2 of 4 samples moved away (cosine 0)
    assert result.worst.task == "embedding" and result.agreement == 0.5
    assert result.logits["top1_agreement"] == 0.75  # the first output with classes: its figures
    assert result.outputs["reg"]["error_agreement"] == 1.0  # 0.01 of a spread of 1.1: within 5%
    labelled = reference_of(ref.names, ref.outputs, np.array([0, 1, 0, 1]), "a")
    scored = compare(labelled, {"reg": regression, "a": flipped, "b": other_flipped})
    assert (scored.accuracy_fp32, scored.accuracy_int8, scored.drop) == (1.0, 0.75, 0.25)


@pytest.mark.parametrize("shift, drop", [
    pytest.param(0.049, 0.0, id="just-within-5%-of-the-spread"),
    pytest.param(0.051, 1.0, id="just-beyond-it"),
])
def test_a_regression_output_is_judged_by_its_error_against_its_spread(shift, drop):
    values = np.linspace(0, 1, 101).reshape(-1, 1)  # spread (std) 0.2916
    ref = reference_of(["reg"], [values])
    result = compare(ref, {"reg": values + shift * values.std()})
    assert result.logits == {} and result.accuracy_fp32 is None
    assert result.drop == pytest.approx(drop) and result.worst.task == "regression"


def test_a_segmentation_output_is_scored_per_pixel_over_its_class_axis():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 4, 6))  # N×C×H×W: the last axis is width, not classes
    labels = logits.argmax(1)
    ref = reference_of(["seg"], [logits], labels, "seg")
    changed = logits.copy()
    changed[0, :, 0, 0] = -changed[0, :, 0, 0]  # one pixel's classes reversed: its argmax moves
    result = compare(ref, {"seg": changed})
    assert ref.specs["seg"].class_axis == 1
    assert result.accuracy_fp32 == 1.0 and result.accuracy_int8 == pytest.approx(1 - 1 / 48)
    assert result.worst.positions == 48 and result.worst.harmed == 1


# The model-file views, on a tiny MLP (tests/calibrate/models.py: x → mm1 → Relu → mm2 → y [→ Softmax → p]).

RANGES = {"x": (-1.0, 1.0), "mm1_out": (-4.0, 4.0), "h": (0.0, 4.0), "y": (-8.0, 8.0), "p": (0.0, 1.0)}


@pytest.fixture
def tiny(tmp_path):
    path = models.tiny_mlp(tmp_path / "tiny.onnx")
    return path, onnx.load(path), {"x": np.random.default_rng(1).uniform(-1, 1, (200, 4)).astype(np.float32)}


def test_the_fp32_file_judged_against_its_own_reference_loses_nothing(tiny):
    path, model, data = tiny
    ref = reference(path, model, data, None, batch_size=32, source="eval.npz")
    assert ref.names == ["y"] and ref.outputs[0].shape == (200, 3) and ref.specs["y"].task == "classification"
    result = judge(ref, path, data, batch_size=7)  # batching is not part of the answer
    assert result.drop == 0.0 and result.logits["top1_agreement"] == 1.0
    assert result.logits["kl_divergence"] == pytest.approx(0.0, abs=1e-9)
    assert result.sha256 == sha256_file(path)


def ort_argmax(path, data):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, data)[0].argmax(-1)


def test_the_int8_file_is_judged_as_written(tiny, tmp_path):
    path, model, data = tiny
    labels = np.asarray(ort_argmax(path, data))
    ref = reference(path, model, data, labels, batch_size=32, source="eval.npz")
    int8 = quantize(model, RANGES, tmp_path / "int8.onnx")
    result = judge(ref, int8, data, batch_size=32)
    assert result.accuracy_fp32 == 1.0 and result.drop == pytest.approx(1.0 - result.accuracy_int8)
    assert result.sha256 == sha256_file(int8)
    assert result.outputs["y"]["sqnr_db"] is not None and result.outputs["y"]["sqnr_db"] > 10


def test_softmax_outputs_are_marked_as_probabilities(tmp_path):
    path = models.tiny_mlp(tmp_path / "soft.onnx", softmax=True)
    ref = reference(path, onnx.load(path), {"x": np.ones((4, 4), np.float32)}, None, batch_size=2, source="e")
    assert ref.names == ["p"] and ref.probabilities == frozenset({"p"})


def test_labels_need_an_output_with_a_class_axis(tmp_path):
    path = models.tiny_mlp(tmp_path / "reg.onnx", classes=1)
    with pytest.raises(InputError, match=r"eval.npz: labels: expected a model output with classes whose shape.*"
                                         r"found labels \[4\]; outputs y \[4, 1\] \(regression\)"):
        reference(path, onnx.load(path), {"x": np.ones((4, 4), np.float32)}, np.zeros(4, np.int64), batch_size=2,
                  source="eval.npz")


def test_layerwise_counts_eval_values_outside_the_calibrated_range(tiny, tmp_path):
    path, model, data = tiny
    ref = reference(path, model, data, None, batch_size=32, source="eval.npz")
    int8 = onnx.load(quantize(model, RANGES, tmp_path / "int8.onnx"))
    view = layerwise(Fp32Side(model, data, batch_size=32), int8, ref, ranges={**RANGES, "x": (-0.5, 0.5)})
    assert view.uncovered["x"] == pytest.approx(np.mean(np.abs(data["x"]) > 0.5))
    assert view.uncovered["y"] == 0.0
    assert [r["value"] for r in view.layers][:1] == ["x"]  # the input's own quantisation error comes first
    assert {r["node"] for r in view.layers} >= {"mm1", "mm2"}


@pytest.mark.parametrize("keep_bytes, fp32_passes", [(models.MIB, 1), (0, 2)], ids=["kept", "over-the-limit"])
def test_the_fp32_side_runs_once_when_its_values_fit(tiny, tmp_path, keep_bytes, fp32_passes):
    """The final view (after the budget loop) compares with the FP32 values of the first: kept, not recomputed,
    unless they exceed `keep_bytes`; either way the figures are the same."""
    path, model, data = tiny
    ref = reference(path, model, data, None, batch_size=32, source="eval.npz")
    side = Fp32Side(model, data, batch_size=32, keep_bytes=keep_bytes)
    first = onnx.load(quantize(model, RANGES, tmp_path / "first.onnx"))
    final = onnx.load(quantize(model, RANGES, tmp_path / "final.onnx", exclude=["mm2"]))
    layerwise(side, first, ref, ranges=RANGES)
    view = layerwise(side, final, ref)
    fresh = layerwise(Fp32Side(model, data, batch_size=32), final, ref)
    assert side.runs == fp32_passes
    assert view == fresh


@pytest.mark.parametrize("flags, vnni", [
    (["fpu", "sse4_2", "avx2", "avx512f", "avx512bw"], False),  # AVX-512 alone (Skylake-SP): u8×s8 sums in int16
    (["avx2", "avx512f", "avx512_vnni"], True),
    (["avx2", "avx_vnni"], True),
    (["avx512f", "amx_int8"], True),
    ([], None),  # no x86 `flags` line (another architecture, no /proc/cpuinfo): unknown, not "without VNNI"
], ids=["avx512-without-vnni", "avx512-vnni", "avx-vnni", "amx", "unknown"])
def test_the_verdict_says_what_cpu_it_was_judged_on(monkeypatch, flags, vnni):
    """Either kind of CPU, on any machine: the flags are faked where they are read."""
    monkeypatch.setattr(evaluate, "cpu_flags", lambda: flags)
    judged_on = evaluate.platform()
    assert judged_on["vnni"] is vnni and judged_on["provider"] == "CPUExecutionProvider"
