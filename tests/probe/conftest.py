"""A real tritonserver (Python backend running onnxruntime) started by the tests, serving planted defects."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from skewgate.common.triton.repository import write_repository
from skewgate.common.triton.server import Installation, triton_home, triton_server


def make_mlp(path, *, seed=0, elem=TensorProto.FLOAT, batch="batch"):
    """relu(x @ W1) @ W2: x [batch, 4] → y [batch, 3]."""
    rng = np.random.default_rng(seed)
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float64
    w1 = numpy_helper.from_array(rng.normal(size=(4, 8)).astype(dtype), name="W1")
    w2 = numpy_helper.from_array(rng.normal(size=(8, 3)).astype(dtype), name="W2")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", elem, [batch, 4])], [helper.make_tensor_value_info("y", elem, [batch, 3])],
        initializer=[w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def make_id_model(path, *, seed=0):
    """An id per sample: ids [batch] (int64) → y = E[ids] [batch, 3] and score = Σ y [batch]; rank-1 on both
    sides, which Triton serves only as `dims: [ 1 ]` with a reshape."""
    table = numpy_helper.from_array(np.random.default_rng(seed).normal(size=(10, 3)).astype(np.float32), name="E")
    axis = numpy_helper.from_array(np.array([1], np.int64), name="axis")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["E", "ids"], ["y"]),
         helper.make_node("ReduceSum", ["y", "axis"], ["score"], keepdims=0)], "ids",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch"])],
        initializer=[table, axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def installation():
    found = Installation(triton_home())
    return found.check()  # BackendError with the fix (`make triton`) when missing


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("onnx")
    rng = np.random.default_rng(0)
    inputs = directory / "inputs.npz"
    np.savez(inputs, x=rng.normal(size=(12, 4)).astype(np.float32))
    ids = directory / "ids.npz"
    np.savez(ids, ids=rng.integers(0, 10, size=12).astype(np.int64))
    return {"good": make_mlp(directory / "good.onnx"), "other": make_mlp(directory / "other.onnx", seed=1),
            "inputs": inputs, "ids": make_id_model(directory / "ids.onnx"),
            "ids_other": make_id_model(directory / "ids_other.onnx", seed=1), "id_inputs": ids}


@pytest.fixture(scope="session")
def served(models, tmp_path_factory, installation):
    """One server, several deployments of the same gated model: one right, the others each broken one way."""
    repo = tmp_path_factory.mktemp("triton") / "repository"
    good = models["good"]
    write_repository(good, repo, name="good")
    batchdim = write_repository(good, repo, name="batchdim")
    config = batchdim.directory / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 4 ]", "dims: [ -1, 4 ]").replace("dims: [ 3 ]",
                                                                                          "dims: [ -1, 3 ]"))
    dtype = write_repository(good, repo, name="dtype")
    (dtype.directory / "config.pbtxt").write_text(
        (dtype.directory / "config.pbtxt").read_text().replace("TYPE_FP32", "TYPE_FP64"))
    write_repository(models["other"], repo, name="otherfile")  # a different file served under the name
    tampered = write_repository(good, repo, name="tampered")
    tampered.onnx.write_bytes(models["other"].read_bytes())  # changed after the repository was written
    write_repository(models["ids"], repo, name="ids")
    write_repository(models["ids_other"], repo, name="ids_otherfile")  # another table served under the name
    names = ("good", "batchdim", "dtype", "otherfile", "tampered", "ids", "ids_otherfile")
    with triton_server(repo, models=names, installation=installation) as server:
        yield server
