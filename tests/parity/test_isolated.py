"""The isolated re-run on a one-op graph: introduced, inherited, and a zero difference never called a divergence."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

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


# A MatMul over 512 terms: ORT's float32 sum and the exact one rounded to float32 differ by rounding on any CPU,
# never by zero, so the decision below is made on a real difference (the Relu above is bit-identical).
RNG = np.random.default_rng(0)
XM = RNG.standard_normal((4, 512)).astype(np.float32)
WM = RNG.standard_normal((512, 64)).astype(np.float32)
EXACT = (XM.astype(np.float64) @ WM.astype(np.float64)).astype(np.float32)  # PyTorch's value, summed otherwise


def _matmul(weight):
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="node_matmul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
                              initializer=[numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _isolated_matmul(weight, tolerance):
    matching = Matching(pairs={"y": "matmul"}, how={"y": "same op and inputs"}, lowering={"y": [0]})
    # the whole model's ORT value carries an upstream error far beyond any tolerance here
    return _isolated("y", matching, {"matmul": EXACT}, {"x": XM, "y": EXACT + 1}, _matmul(weight), tolerance, 4)


def _rounding_alone() -> float:
    from skewgate.common.runtime import run_by_name, session

    return float(np.abs(run_by_name(session(_matmul(WM)), {"x": XM})["y"] - EXACT).max())


def test_an_op_that_rounds_otherwise_but_within_tolerance_inherits_its_error():
    text = _isolated_matmul(WM, LAYER_TOLERANCE)
    assert "the error is inherited" in text
    assert "max |a-e| 0," not in text  # a real rounding difference, judged: not the bit-identical shortcut


def test_an_op_whose_own_weight_differs_introduces_its_error():
    planted = WM.copy()
    planted[0, 0] += 0.05  # one weight off: 0.05 × x on every output of column 0, beyond rounding
    assert "the error is introduced here" in _isolated_matmul(planted, LAYER_TOLERANCE)


@pytest.mark.parametrize(("share", "expected"), [
    pytest.param(0.95, "the error is inherited", id="rounding-just-inside-the-tolerance"),
    pytest.param(1.05, "the error is introduced here", id="rounding-just-outside-the-tolerance"),
])
def test_introduced_or_inherited_is_decided_at_the_tolerance(share, expected):
    from skewgate.common.compare import Tolerance

    rounding = _rounding_alone()
    assert rounding > 0
    assert expected in _isolated_matmul(WM, Tolerance(rtol=0.0, atol=rounding / share))
