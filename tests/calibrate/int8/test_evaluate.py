"""The verdict's figures from final outputs: which outputs are scored how."""

import numpy as np
import onnx
import pytest

from skewgate.calibrate.int8 import evaluate
from skewgate.calibrate.int8.evaluate import Fp32Side, Reference, agreement, compare, judge, layerwise, reference
from skewgate.calibrate.int8.quantize import quantize
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from tests.calibrate import models


def test_probabilities_are_compared_as_they_are():
    p = np.array([[0.98, 0.01, 0.01], [0.2, 0.7, 0.1]])
    q = np.array([[0.90, 0.05, 0.05], [0.2, 0.7, 0.1]])
    as_probabilities = agreement(p, q, probabilities=True)
    expected = np.mean([np.sum(p[0] * np.log(p[0] / q[0])), 0.0])
    assert as_probabilities["kl_divergence"] == pytest.approx(expected, rel=1e-6)
    # a second softmax over probabilities flattens them and understates the damage
    assert agreement(p, q, probabilities=False)["kl_divergence"] < as_probabilities["kl_divergence"] / 10
    assert as_probabilities["top1_agreement"] == 1.0


def test_labels_score_the_first_classifier_output_and_disagreement_takes_the_worst():
    logits = np.array([[3.0, 0.0], [0.0, 3.0], [3.0, 0.0], [0.0, 3.0]])
    other = np.array([[1.0, 0.0, 0.0]] * 4)
    regression = np.ones((4, 1))
    ref = Reference(["reg", "a", "b"], [regression, logits, other], frozenset(), None, None)
    flipped = logits.copy()
    flipped[0] = [0.0, 3.0]
    other_flipped = other.copy()
    other_flipped[:2] = [0.0, 1.0, 0.0]
    result = compare(ref, {"reg": regression * 1.1, "a": flipped, "b": other_flipped})
    assert ref.classifiers == ["a", "b"]
    assert result.drop == 0.5  # output b: 2 of 4 disagree
    assert result.logits["top1_agreement"] == 0.75  # the first classifier output's figures
    assert result.outputs["reg"]["sqnr_db"] == pytest.approx(20.0)  # reported, not gated
    labelled = Reference(ref.names, ref.outputs, frozenset(), np.array([0, 1, 0, 1]), "a")
    scored = compare(labelled, {"reg": regression, "a": flipped, "b": other_flipped})
    assert (scored.accuracy_fp32, scored.accuracy_int8, scored.drop) == (1.0, 0.75, 0.25)


def test_no_classifier_output_scores_nothing():
    ref = Reference(["reg"], [np.ones((4, 1))], frozenset(), None, None)
    result = compare(ref, {"reg": np.ones((4, 1))})
    assert result.logits == {} and result.drop == 0.0 and result.accuracy_fp32 is None


def test_each_trial_scores_only_the_candidate(monkeypatch):
    """The FP32 side of the figures (top-1, distribution, accuracy) is derived once per run, not per trial."""
    from skewgate.calibrate.int8 import evaluate

    logits = np.array([[3.0, 0.0], [0.0, 3.0], [3.0, 0.0], [0.0, 3.0]])
    ref = Reference(["a"], [logits], frozenset(), np.array([0, 1, 0, 1]), "a")
    scored, real = [], evaluate.score
    monkeypatch.setattr(evaluate, "score", lambda output, **kw: scored.append(output) or real(output, **kw))
    results = [compare(ref, {"a": logits[::-1].copy()}) for _ in range(3)]
    assert len(scored) == 1 + 3  # the FP32 output once, then each candidate
    assert {(r.accuracy_fp32, r.accuracy_int8) for r in results} == {(1.0, 0.0)}


# The model-file views, on a tiny MLP (tests/calibrate/models.py: x → mm1 → Relu → mm2 → y [→ Softmax → p]).

RANGES = {"x": (-1.0, 1.0), "mm1_out": (-4.0, 4.0), "h": (0.0, 4.0), "y": (-8.0, 8.0), "p": (0.0, 1.0)}


@pytest.fixture
def tiny(tmp_path):
    path = models.tiny_mlp(tmp_path / "tiny.onnx")
    return path, onnx.load(path), {"x": np.random.default_rng(1).uniform(-1, 1, (200, 4)).astype(np.float32)}


def test_the_fp32_file_judged_against_its_own_reference_loses_nothing(tiny):
    path, model, data = tiny
    ref = reference(path, model, data, None, batch_size=32, source="eval.npz")
    assert ref.names == ["y"] and ref.outputs[0].shape == (200, 3) and ref.classifiers == ["y"]
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
    with pytest.raises(InputError, match=r"eval.npz: labels: expected a model output with a class axis last"):
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
