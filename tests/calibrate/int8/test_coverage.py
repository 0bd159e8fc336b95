"""MAC counts from one run's shapes, and what counts as INT8 in a QDQ file."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from skewgate.calibrate.int8.coverage import coverage, describe, macs_per_node


def conv_gemm_model() -> onnx.ModelProto:
    """x[N,2,5,5] → Conv(3 out, 3×3, pad 1) → Flatten → Gemm(75 → 4); plus an LSTM beside it on y[T=6,N,3]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n) for n, s in
             (("w", (3, 2, 3, 3)), ("fc", (4, 75)), ("lw", (1, 16, 3)), ("lr", (1, 16, 4)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc"], ["out"], name="gemm", transB=1),
             helper.make_node("LSTM", ["y", "lw", "lr"], ["seq"], name="lstm", hidden_size=4)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 5]),
                                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, "N", 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4]),
                               helper.make_tensor_value_info("seq", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_macs_per_sample_by_op():
    model = conv_gemm_model()
    macs = macs_per_node(model, {"x": np.zeros((1, 2, 5, 5), np.float32), "y": np.zeros((6, 1, 3), np.float32)})
    assert macs == {"conv": ("Conv", 3 * 5 * 5 * 2 * 3 * 3), "gemm": ("Gemm", 4 * 75),
                    "lstm": ("LSTM", 6 * 1 * 1 * 16 * (3 + 4))}


def test_a_node_is_int8_when_its_operands_are_dequantized():
    model = conv_gemm_model()
    # Q/DQ in front of the Gemm only, as the quantiser writes them
    scale, zero = numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "z")
    model.graph.initializer.extend([scale, zero])
    gemm = next(n for n in model.graph.node if n.name == "gemm")
    for value in ("f", "fc"):
        model.graph.node.extend([helper.make_node("QuantizeLinear", [value, "s", "z"], [f"{value}_q"]),
                                 helper.make_node("DequantizeLinear", [f"{value}_q", "s", "z"], [f"{value}_dq"])])
    gemm.input[:] = ["f_dq", "fc_dq"]
    macs = {"conv": ("Conv", 450), "gemm": ("Gemm", 300), "lstm": ("LSTM", 672)}
    found = coverage(model, macs)
    assert found["mac_share"] == 300 / (450 + 300 + 672)
    assert found["op_types"] == {"Conv": {"fp32": 1}, "Flatten": {"fp32": 1}, "Gemm": {"int8": 1},
                                 "LSTM": {"fp32": 1}}
    assert found["fp32_nodes"] == ["conv", "lstm"]  # a Flatten only moves values
    assert describe(found).startswith("INT8 runs 21.1% of 1,422 MACs per sample; FP32: LSTM 47.3% of MACs")
