"""calibrate judges each output as its task says (common/output_tasks.py), end to end on written INT8 files: a
segmentation head per pixel over its class axis, an embedding by its cosine to FP32."""

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from skewgate.calibrate.core import calibrate
from skewgate.calibrate.run import CalibrateOptions

RNG = np.random.default_rng(0)
SAMPLES = 64


def _save(tmp_path, name, nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def segmentation_head(tmp_path):
    """N×3×8×8 → 1×1 Conv → Relu → 1×1 Conv → N×4×8×8 class scores per pixel."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["y"], name="conv2")]
    return _save(tmp_path, "seg", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
                 {"w1": RNG.normal(size=(16, 3, 1, 1)).astype(np.float32), "b1": np.zeros(16, np.float32),
                  "w2": RNG.normal(size=(4, 16, 1, 1)).astype(np.float32), "b2": np.zeros(4, np.float32)})


def embedding_tower(tmp_path):
    """N×8 → MatMul → Relu → MatMul → L2-normalised N×16."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["e"], name="fc2"),
             helper.make_node("LpNormalization", ["e"], ["y"], name="normalize", axis=-1, p=2)]
    return _save(tmp_path, "emb", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
                 {"w1": RNG.normal(size=(8, 32)).astype(np.float32),
                  "w2": RNG.normal(size=(32, 16)).astype(np.float32)})


def data(tmp_path, shape, **extra):
    calibration, eval_data = tmp_path / "calib.npz", tmp_path / "eval.npz"
    np.savez(calibration, x=RNG.normal(size=(SAMPLES, *shape)).astype(np.float32))
    np.savez(eval_data, x=RNG.normal(size=(SAMPLES, *shape)).astype(np.float32), **extra)
    return {"calibration": calibration, "eval_data": eval_data, "out": tmp_path / "int8.onnx"}


def fp32_outputs(path, eval_data):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.load(eval_data)["x"]})[0]


LOOSE = {"max_accuracy_drop": 1.0, "min_top1_agreement": 0.5}  # these tests read what is counted, not the limit


def test_a_segmentation_head_is_judged_per_pixel_and_its_labels_per_pixel(tmp_path):
    model = segmentation_head(tmp_path)
    files = data(tmp_path, (3, 8, 8))
    labels = fp32_outputs(model, files["eval_data"]).argmax(1)  # N×H×W: FP32 is right on every pixel
    np.save(tmp_path / "labels.npy", labels)
    result = calibrate(onnx=model, labels=tmp_path / "labels.npy", options=CalibrateOptions(**LOOSE), **files)
    details = result.verdict.details
    assert details["outputs"]["y"]["task"] == "segmentation" and details["accuracy"]["fp32"] == 1.0
    check = result.verdict.check("top1_agreement")
    assert f"of {SAMPLES * 64} positions kept" in check.detail  # pixels, not rows of the width axis
    assert details["accuracy"]["int8"] == pytest.approx(check.value)  # FP32's labels: accuracy is agreement
    assert "mIoU vs FP32" in check.detail
    # declared otherwise, the same output counts rows over its last axis: what calibrate did before
    declared = calibrate(onnx=model, options=CalibrateOptions(**LOOSE, task="classification", class_axis=-1),
                         **files)
    assert f"of {SAMPLES * 4 * 8} positions kept" in declared.verdict.check("top1_agreement").detail


def test_an_embedding_is_judged_by_its_cosine_to_fp32_at_the_limit(tmp_path):
    model = embedding_tower(tmp_path)
    files = data(tmp_path, (8,))
    result = calibrate(onnx=model, options=CalibrateOptions(), **files)
    outputs = result.verdict.details["outputs"]["y"]
    assert outputs["task"] == "embedding" and result.verdict.status == "pass", result.verdict.message
    assert result.verdict.check("cosine_agreement").value == 1.0
    assert outputs["neighbour_agreement"] > 0.8 and 0.99 < outputs["cosine_min"] < 1.0
    # the limits at the line, on the file the first trial writes (no fallback: the same file every run)
    first = CalibrateOptions(max_fallback_layers=0)
    calibrate(onnx=model, options=first, **files)
    cosines = np.sort(np.sum(fp32_outputs(model, files["eval_data"]) * fp32_outputs(files["out"], files["eval_data"]),
                             axis=1))  # unit rows: the dot product is the cosine
    assert cosines[0] < cosines[1]
    # just below the worst sample's cosine: nothing harmed; between the worst and the next: one sample of 64
    # harmed, an agreement below 0.99
    below = replace(first, min_cosine_similarity=float(cosines[0]) - 1e-9)
    assert calibrate(onnx=model, options=below, **files).verdict.check("cosine_agreement").value == 1.0
    above = calibrate(onnx=model, options=replace(first, min_cosine_similarity=float(cosines[0] + cosines[1]) / 2),
                      **files)
    check = above.verdict.check("cosine_agreement")
    assert not check.passed and check.value == pytest.approx(1 - 1 / SAMPLES)
    assert above.verdict.details["outputs"]["y"]["cosine_min"] == pytest.approx(cosines[0], abs=1e-6)
