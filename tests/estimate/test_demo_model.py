"""estimate on the demo's CNN (trained, exported to ONNX), a model the gate was not tuned on, over two training
seeds: healthy serving data passes; the serving bug that forgot to divide pixels by 16 costs accuracy the
estimate cannot see (its scores lie beyond what the reference calibrated), so it is not judged and fails."""

from pathlib import Path

import numpy as np
import pytest

from skewgate.demo.digits import INPUT_NAME, train_and_save
from skewgate.estimate.core import EstimateOptions, estimate
from skewgate.export.core import export_model


@pytest.fixture(scope="module", params=[1, 2], ids=["seed-1", "seed-2"])
def demo(request, tmp_path_factory):
    directory: Path = tmp_path_factory.mktemp(f"demo-{request.param}")
    data = train_and_save(directory, epochs=5, seed=request.param)
    onnx = directory / "good.onnx"
    export_model(model=data.good, inputs=data.examples, out=onnx)
    return data, onnx


def test_healthy_serving_data_passes_within_a_few_points_of_what_its_labels_realise(demo):
    data, onnx = demo
    verdict = estimate(onnx=onnx, reference=data.examples, current=data.current, options=EstimateOptions())
    assert verdict.status == "pass", verdict.message
    assert verdict.details["extrapolated_share"] < EstimateOptions().max_extrapolated


def test_the_unscaled_serving_bug_is_not_judged_and_fails_though_its_estimate_looks_fine(demo, tmp_path):
    """On the labelled examples read through the bug, the labels realise far less than the estimate says."""
    data, onnx = demo
    examples = np.load(data.examples)
    np.savez(tmp_path / "bug.npz", **{INPUT_NAME: examples[INPUT_NAME] * 16.0})
    np.save(tmp_path / "labels.npy", examples["labels"])
    for current, labels in [(data.serving_bug, None), (tmp_path / "bug.npz", tmp_path / "labels.npy")]:
        verdict = estimate(onnx=onnx, reference=data.examples, current=current, current_labels=labels,
                           options=EstimateOptions())
        check = next(c for c in verdict.checks if c.name == "performance.estimated_drop")
        assert verdict.status == "fail" and check.detail.startswith("not judged"), current
        assert verdict.details["extrapolated_share"] > 0.5
    accuracy = verdict.details["table"][0]
    assert accuracy["estimated"] - accuracy["realised"] > 0.05 and not accuracy["covered"]
