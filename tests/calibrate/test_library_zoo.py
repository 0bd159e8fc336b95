"""calibrate on library models whose output is not class logits (tests/library_zoo.py): torchvision's LR-ASPP is
judged per pixel over its class axis (axis 1, not the last), a CLIP-style image tower by its cosine to FP32."""

import numpy as np
import onnxruntime as ort
import pytest

from skewgate.calibrate.core import calibrate
from skewgate.calibrate.run import CalibrateOptions
from tests.library_zoo import SAMPLES

# the zoo's 12 samples calibrate and judge; the first trial's file is the one judged (no fallback)
FEW = CalibrateOptions(min_calibration_samples=SAMPLES, max_fallback_layers=0)


def _calibrate(library_zoo, tmp_path, name, options=FEW):
    files, onnx_path, _ = library_zoo(name)
    out = tmp_path / f"{name}.int8.onnx"
    return calibrate(onnx=onnx_path, calibration=files.inputs, eval_data=files.inputs, out=out, options=options), out


def test_a_segmentation_model_is_judged_per_pixel_over_its_class_axis(library_zoo, tmp_path):
    result, _ = _calibrate(library_zoo, tmp_path, "lraspp")
    [output] = result.verdict.details["outputs"].values()
    assert output["task"] == "segmentation", output
    check = result.verdict.check("top1_agreement")
    assert f"of {SAMPLES * 64 * 64} positions kept" in check.detail and "over axis 1" in check.detail
    assert "mIoU vs FP32" in check.detail


def test_an_embedding_tower_is_judged_by_cosine_and_blocks_past_its_worst_sample(library_zoo, tmp_path):
    files, onnx_path, _ = library_zoo("clip_vision")
    result, out = _calibrate(library_zoo, tmp_path, "clip_vision")
    assert result.verdict.status == "pass", result.verdict.message
    assert result.verdict.check("cosine_agreement").value == 1.0
    feeds = {"x": np.load(files.inputs)["x"]}
    cosines = np.sort(np.sum(ort.InferenceSession(str(onnx_path)).run(None, feeds)[0]
                             * ort.InferenceSession(str(out)).run(None, feeds)[0], axis=1))  # unit rows
    assert cosines[0] < cosines[1]
    # a limit between the worst sample's cosine and the next: that sample is harmed, 11 of 12 kept, below 0.99
    above = CalibrateOptions(min_calibration_samples=SAMPLES, max_fallback_layers=0,
                             min_cosine_similarity=float(cosines[0] + cosines[1]) / 2)
    blocked, _ = _calibrate(library_zoo, tmp_path, "clip_vision", above)
    check = blocked.verdict.check("cosine_agreement")
    assert blocked.verdict.status == "fail" and not check.passed
    assert check.value == pytest.approx(1 - 1 / SAMPLES)
