import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from skewgate.calibrate.int8.equalize import Pair, equalizable_pairs, equalize


def chain(middle: str, *, extra_consumer: bool = False) -> onnx.ModelProto:
    """x → Conv(a) → `middle` → Conv(b) → y; channel 0 of the first conv is 500× the others."""
    rng = np.random.default_rng(0)
    wa = rng.normal(size=(4, 1, 3, 3)).astype(np.float32)
    wa[0] *= 500
    wb = rng.normal(size=(2, 4, 3, 3)).astype(np.float32)
    wb[:, 0] /= 500
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node(middle, ["a"], ["m"], name="act"),
             helper.make_node("Conv", ["m", "wb"], ["y"], name="conv_b", pads=[1, 1, 1, 1])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_consumer:  # the activation is also a graph output: rescaling it would change that output
        outputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["N", 1, 6, 6])], outputs,
                              initializer=[numpy_helper.from_array(wa, "wa"),
                                           numpy_helper.from_array(np.ones(4, np.float32), "ba"),
                                           numpy_helper.from_array(wb, "wb")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(("middle", "extra", "found"), [
    pytest.param("Relu", False, True, id="relu-commutes-with-scaling"),
    pytest.param("Gelu", False, False, id="gelu-does-not"),
    pytest.param("Relu", True, False, id="activation-also-a-graph-output"),
])
def test_pairs_only_where_rescaling_is_exact(middle, extra, found):
    pairs = equalizable_pairs(chain(middle, extra_consumer=extra))
    assert pairs == ([Pair("conv_a", "conv_b", "m")] if found else [])


def test_equalize_flattens_the_outlier_channel_and_keeps_the_function():
    model = chain("Relu")
    x = np.random.default_rng(1).normal(size=(8, 1, 6, 6)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(  # noqa: E731
        None, {"x": x})
    intermediates = helper.make_tensor_value_info("m", TensorProto.FLOAT, None)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(intermediates)
    y, m = run(probe)
    absmax = np.abs(m).max(axis=(0, 2, 3))
    rescaled, [record] = equalize(model, equalizable_pairs(model), {"m": absmax})
    assert record["channel_spread_before"] > 100 and record["channel_spread_after"] < 3
    np.testing.assert_allclose(run(rescaled)[0], y, rtol=1e-4, atol=1e-4)


def test_equalize_leaves_balanced_channels_alone():
    model = chain("Relu")
    rescaled, records = equalize(model, equalizable_pairs(model), {"m": np.ones(4)})
    assert records == [] and rescaled.graph.initializer[0].raw_data == model.graph.initializer[0].raw_data
