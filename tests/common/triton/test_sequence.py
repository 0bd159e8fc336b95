"""The stateful repository writer without a server: the state pairs checked against STEP, the initial state, and
both flavours' sequence batcher config (Python backend keeping the state, ONNX Runtime with implicit state)."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec
from skewgate.common.states import parse_states
from skewgate.common.triton.repository import onnx_signature
from skewgate.common.triton.sequence import (
    check_states,
    initial_state,
    served_signature,
    write_sequence_repository,
)


def make_rnn_step(path, *, state_out_elem=TensorProto.FLOAT, input_name="x"):
    """h_next = tanh(x @ W + h @ U), y = h_next @ V: x [batch, 4], h [batch, 8] → y [batch, 3], h_next."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name=name)
               for name, shape in (("W", (4, 8)), ("U", (8, 8)), ("V", (8, 3)))]
    # h_next's value is t; a STEP whose state output has another dtype than its state input casts it
    nodes = [helper.make_node("MatMul", [input_name, "W"], ["a"]), helper.make_node("MatMul", ["h", "U"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Tanh", ["c"], ["t"]),
             helper.make_node("MatMul", ["t", "V"], ["y"]),
             helper.make_node("Identity", ["t"], ["h_next"]) if state_out_elem == TensorProto.FLOAT
             else helper.make_node("Cast", ["t"], ["h_next"], to=state_out_elem)]
    graph = helper.make_graph(
        nodes, "step",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("h_next", state_out_elem, ["batch", 8])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


SPECS = {"h": TensorSpec("h", "float32", (None, 8))}


def test_python_flavour_keeps_the_state_in_model_py_under_the_sequence_batcher(tmp_path):
    step = make_rnn_step(tmp_path / "step.onnx")
    initial = {"h": np.full((1, 8), 0.5, np.float32)}
    written = write_sequence_repository(step, tmp_path / "repo", name="rnn", states={"h": "h_next"},
                                        initial=initial)
    config = (written.directory / "config.pbtxt").read_text()
    assert 'name: "h"' not in config and 'name: "h_next"' not in config  # the client never sends the state
    assert '{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }' in config
    assert "dynamic_batching" not in config and "oldest {" in config
    for kind in ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY",
                 "CONTROL_SEQUENCE_CORRID"):
        assert kind in config
    parameter = config.split('string_value: ', 1)[1].rsplit(" } }", 1)[0]
    assert json.loads(json.loads(parameter)) == {"h": "h_next"}
    version = written.onnx.parent
    assert "CORRID" in (version / "model.py").read_text()
    with np.load(version / "initial_state.npz") as saved:
        np.testing.assert_array_equal(saved["h"], initial["h"])


def test_onnxruntime_flavour_uses_implicit_state_with_its_initial_state(tmp_path):
    step = make_rnn_step(tmp_path / "step.onnx")
    zeros = write_sequence_repository(step, tmp_path / "repo", name="zeros", states={"h": "h_next"},
                                      initial=initial_state(SPECS), platform="onnxruntime_onnx")
    config = (zeros.directory / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config and "control_input" not in config
    assert ('{ input_name: "h" output_name: "h_next" data_type: TYPE_FP32 dims: [ 8 ] initial_state: '
            '{ name: "h_initial" data_type: TYPE_FP32 dims: [ 8 ] zero_data: true } }') in config
    learned = np.arange(8, dtype=np.float32).reshape(1, 8)
    given = write_sequence_repository(step, tmp_path / "repo", name="given", states={"h": "h_next"},
                                      initial={"h": learned}, platform="onnxruntime_onnx")
    assert 'data_file: "h"' in (given.directory / "config.pbtxt").read_text()
    assert (given.directory / "initial_state" / "h").read_bytes() == learned.tobytes()


def test_states_are_checked_against_step(tmp_path):
    signature = onnx_signature(make_rnn_step(tmp_path / "step.onnx"))
    assert [t.name for t in served_signature(signature, {"h": "h_next"}).inputs] == ["x"]
    with pytest.raises(InputError, match=r"state input 'hidden': expected one of STEP's inputs \['h', 'x'\]"):
        check_states(signature, {"hidden": "h_next"}, source="step.onnx")
    with pytest.raises(InputError, match="state output 'h_out'"):
        check_states(signature, {"h": "h_out"}, source="step.onnx")
    with pytest.raises(InputError, match="--state: expected at least one"):
        check_states(signature, {}, source="step.onnx")
    cast = onnx_signature(make_rnn_step(tmp_path / "cast.onnx", state_out_elem=TensorProto.DOUBLE))
    with pytest.raises(InputError, match="state output 'h_next': expected the state input 'h''s FP32, found FP64"):
        check_states(cast, {"h": "h_next"}, source="cast.onnx")
    clash = onnx_signature(make_rnn_step(tmp_path / "clash.onnx", input_name="START"))
    with pytest.raises(InputError, match="START: expected no tensor named as a sequence control"):
        check_states(clash, {"h": "h_next"}, source="clash.onnx")


def test_parse_states_and_initial_state(tmp_path):
    assert parse_states(["h=h_next", "c=c_next"]) == {"h": "h_next", "c": "c_next"}
    for bad in (["h"], ["=h_next"], ["h=a", "h=b"]):
        with pytest.raises(InputError, match="--state"):
            parse_states(bad)
    assert initial_state(SPECS)["h"].shape == (1, 8)
    with pytest.raises(InputError, match="dynamic dimensions besides the batch"):
        initial_state({"k": TensorSpec("k", "float32", (None, None, 8))})
    np.savez(tmp_path / "h0.npz", h=np.ones((1, 8), np.float64))
    with pytest.raises(InputError, match=r"h0\.npz: h: expected dtype float32, found dtype float64"):
        initial_state(SPECS, tmp_path / "h0.npz")
