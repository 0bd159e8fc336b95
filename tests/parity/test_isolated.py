"""The isolated re-run on a one-op graph: introduced, inherited, and a zero difference never called a divergence."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from skewgate.common.rounding import first_samples
from skewgate.parity.core import LAYER_TOLERANCE, _isolated, batch_axis
from skewgate.parity.internals.matching import Matching

X = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
RELU = np.maximum(X, 0)


@pytest.fixture
def model():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="node_relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["batch", 6])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _matching():
    return Matching(pairs={"r": "relu"}, how={"r": "same op and inputs"}, lowering={"r": [0]})


@pytest.mark.parametrize(
    ("torch_relu", "ort_relu", "expected"),
    [
        pytest.param(RELU, RELU, "inconclusive", id="no-divergence-on-these-samples"),
        pytest.param(RELU, RELU + 1, "the error is inherited", id="op-alone-matches-so-zero-is-no-divergence"),
        pytest.param(RELU + 1, RELU, "the error is introduced here", id="op-alone-still-diverges"),
    ],
)
def test_isolated_verdicts(model, torch_relu, ort_relu, expected):
    text = _isolated("r", _matching(), {"relu": torch_relu}, {"x": X, "r": ort_relu}, model, LAYER_TOLERANCE, 4)
    assert expected in text
    if "inherited" in text:
        assert "max |a-e| 0," in text


def test_inputs_are_cut_along_their_dynamic_axis():
    from skewgate.common.io import TensorSpec

    spec = TensorSpec(name="x", dtype="float32", shape=(8, None, 3))
    assert batch_axis(spec) == 1
    assert first_samples({"x": np.zeros((8, 10, 3))}, 4, axes={"x": batch_axis(spec)})["x"].shape == (8, 4, 3)
    assert batch_axis(TensorSpec(name="x", dtype="float32", shape=(2, 3))) is None
