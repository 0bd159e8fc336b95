"""Shared fixtures: small real models (ONNX built with onnx.helper, .pt2 from torch.export)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

# Where `make triton` puts tritonserver; the Makefile exports the same default.
os.environ.setdefault("SKEWGATE_TRITON_HOME", str(Path(__file__).resolve().parents[1] / ".triton"))
# Tests talk to 127.0.0.1 only: no MLflow telemetry from the tests' own imports of mlflow, the `mlflow server`s they
# start, or the CLI and KFP steps they run (children inherit it).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(autouse=True)
def _logging_as_it_was():
    """A CLI run in-process (`skewgate ... --quiet`) sets the `skewgate` logger's level for the process; put it
    back, so that a later test reading warnings with `caplog` sees them whatever ran before it. (Its handlers are
    pytest's to add and remove per phase.)"""
    import logging

    ours, root = logging.getLogger("skewgate"), logging.getLogger()
    level, root_level = ours.level, root.level
    yield
    ours.setLevel(level)
    root.setLevel(root_level)


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
def _empty_mlflow_store(tmp_path_factory) -> Path:
    """An MLflow SQLite store with its schema made, once per session: MLflow runs its migrations on every new
    store, a second or two of CPU that dozens of tests would each pay."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("empty-mlflow-store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_db(tmp_path, _empty_mlflow_store) -> str:
    """The URI of a new, empty MLflow SQLite store at `tmp_path/mlflow.db` (a copy of the session's migrated one;
    the tests that start from no store at all write their own URI)."""
    shutil.copyfile(_empty_mlflow_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture(scope="session")
def library_zoo(tmp_path_factory):
    """library_zoo("resnet18") → (Files, exported .onnx, export verdict), built once per test run;
    `train=True`: the model saved in training mode (its export verdict; the .onnx is not for parity).

    Exporting a library model costs seconds to tens of seconds, and under pytest-xdist every worker has a session
    of its own: the files are built once for all workers, in the folder their temporary folders share, under a
    lock per model; the export verdict is written last, so its presence says the files are complete."""
    from skewgate.common.verdict import Verdict
    from skewgate.export.core import export_model
    from tests.library_zoo import Files, save

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    directory = shared / "library_zoo"
    directory.mkdir(exist_ok=True)

    def get(name, *, train=False):
        # the training-mode variant in a folder of its own: `save` writes the inputs under the model's name
        folder = directory / "train" if train else directory
        files = Files.of(name, folder, train=train)
        onnx_path, verdict_path = files.pt2.with_suffix(".onnx"), files.pt2.with_suffix(".export.json")
        with _exclusive(directory / f"{files.pt2.stem}.lock"):
            if not verdict_path.exists():
                save(name, folder, train=train)
                export_model(model=files.pt2, inputs=files.inputs, out=onnx_path).write(verdict_path)
        return files, onnx_path, Verdict.read(verdict_path)

    return get


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """Hold an exclusive lock on `lock_path` (a file created for it) between processes."""
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def keys(tmp_path_factory):
    """(private, public) key files made by `skewgate keys generate`, once per session."""
    from skewgate.cli import main

    folder = tmp_path_factory.mktemp("keys")
    assert main(["keys", "generate", "--out", str(folder)]) == 0
    return folder / "skewgate.key", folder / "skewgate.pub"
