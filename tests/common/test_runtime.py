"""The ONNX Runtime sessions parity and calibrate build: outputs by name, and threads that do not spin."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from skewgate.common.runtime import run_by_name, session


def _double_and_negate() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 3]) for n in ("double", "negative")]
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["double"]),
                               helper.make_node("Neg", ["x"], ["negative"])], "g", [x], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_outputs_come_back_by_name():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    values = run_by_name(session(_double_and_negate()), {"x": x})
    assert list(values) == ["double", "negative"]
    np.testing.assert_array_equal(values["double"], 2 * x)
    np.testing.assert_array_equal(values["negative"], -x)


def test_worker_threads_do_not_spin_between_runs():
    # parity interleaves ORT with PyTorch and numpy on the same cores: spinning ORT threads starve them
    options = session(_double_and_negate()).get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_arena_can_be_turned_off_for_graphs_that_expose_intermediates():
    assert session(_double_and_negate()).get_session_options().enable_cpu_mem_arena
    assert not session(_double_and_negate(), arena=False).get_session_options().enable_cpu_mem_arena
