"""Models as MLflow sees them: the ONNX file's signature and external data, the pinned requirements logged with a
version, and a `models:/` PyTorch model loaded for export."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.errors import InputError, Rejected

if TYPE_CHECKING:

    pass
from skewgate.common.mlflow_log._client import _mapped

log = logging.getLogger(__name__)


def onnx_external_data(path: Path) -> set[str]:
    """The external-data locations (relative to the file's folder, as written) that the ONNX file at `path`
    references: what ONNX Runtime also reads when it loads it. The file is parsed, its external data not read."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    return {entry.value for tensor in _get_all_tensors(model) if uses_external_data(tensor)
            for entry in tensor.external_data if entry.key == "location"}


def onnx_signature(model: Any) -> Any:
    """An MLflow tensor signature from the ONNX graph's inputs and outputs (symbolic dimensions → -1)."""
    import onnx
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    initializers = {init.name for init in model.graph.initializer}

    def spec(value: Any) -> TensorSpec:
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        return TensorSpec(dtype, shape, value.name)

    return ModelSignature(inputs=Schema([spec(v) for v in model.graph.input if v.name not in initializers]),
                          outputs=Schema([spec(v) for v in model.graph.output]))


def _pinned_requirements() -> list[str]:
    from importlib import metadata

    return [f"{dist}=={metadata.version(dist)}" for dist in ("onnx", "onnxruntime", "numpy")]


def load_pytorch_model(uri: str) -> Any:
    """Load an MLflow pytorch model (`models:/…`, `runs:/…`). This unpickles code: trusted registries only.
    A URI that names no loadable model is an `InputError`; a server that cannot be reached stays `Unreachable`."""
    import mlflow
    import mlflow.pytorch

    try:
        with _mapped(mlflow.get_tracking_uri(), f"load {uri}"):
            return mlflow.pytorch.load_model(uri)
    except (Rejected, AttributeError) as err:  # unpickling a class that is not importable is an AttributeError
        cause = err.__cause__ or err
        raise InputError(uri, expected="an MLflow pytorch model URI",
                         found=f"{type(cause).__name__}: {cause}") from err
