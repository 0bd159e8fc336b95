"""Shared fixtures: small real models (ONNX built with onnx.helper, .pt2 from torch.export)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# Where `make triton` puts tritonserver; the Makefile exports the same default.
os.environ.setdefault("SKEWGATE_TRITON_HOME", str(Path(__file__).resolve().parents[1] / ".triton"))
# Tests talk to 127.0.0.1 only: no MLflow telemetry from the tests' own imports of mlflow, the `mlflow server`s they
# start, or the CLI and KFP steps they run (children inherit it).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory):
    """y = x @ W with a symbolic batch: a valid ONNX file in a few hundred bytes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 2), np.float32), name="W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def library_zoo(tmp_path_factory):
    """library_zoo("resnet18") → (Files, exported .onnx, export verdict), built once per session;
    `train=True`: the model saved in training mode (its export verdict; the .onnx is not for parity)."""
    from skewgate.export.core import export_model
    from tests.library_zoo import save

    directory = tmp_path_factory.mktemp("library_zoo")
    cache = {}

    def get(name, *, train=False):
        if (name, train) not in cache:
            files = save(name, directory, train=train)
            onnx_path = files.pt2.with_suffix(".onnx")
            verdict = export_model(model=files.pt2, inputs=files.inputs, out=onnx_path)
            cache[name, train] = (files, onnx_path, verdict)
        return cache[name, train]

    return get


@pytest.fixture(scope="session")
def keys(tmp_path_factory):
    """(private, public) key files made by `skewgate keys generate`, once per session."""
    from skewgate.cli import main

    folder = tmp_path_factory.mktemp("keys")
    assert main(["keys", "generate", "--out", str(folder)]) == 0
    return folder / "skewgate.key", folder / "skewgate.pub"
