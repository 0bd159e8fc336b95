"""Write a Triton model repository for an ONNX model: `<repo>/<name>/config.pbtxt`,
`<repo>/<name>/<version>/model.onnx` and its SHA-256 beside it.

Two flavours of the same deployment: `onnxruntime_onnx` (the ONNX Runtime backend, what clusters run) and
`python` (a `model.py` that runs the same file with onnxruntime, for servers without the ORT backend — the
tritonserver from the `nvidia-pytriton` wheel ships only the Python backend).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import load_onnx, sha256_file

if TYPE_CHECKING:
    import onnx

Platform = Literal["onnxruntime_onnx", "python"]
InstanceKind = Literal["CPU", "GPU"]

# ONNX TensorProto element type → Triton data type
TRITON_TYPES = {1: "TYPE_FP32", 2: "TYPE_UINT8", 3: "TYPE_INT8", 4: "TYPE_UINT16", 5: "TYPE_INT16",
                6: "TYPE_INT32", 7: "TYPE_INT64", 8: "TYPE_STRING", 9: "TYPE_BOOL", 10: "TYPE_FP16",
                11: "TYPE_FP64", 12: "TYPE_UINT32", 13: "TYPE_UINT64", 16: "TYPE_BF16"}


@dataclass(frozen=True)
class TensorSignature:
    name: str
    data_type: str  # Triton's TYPE_* name
    shape: tuple[int, ...]  # full ONNX shape, -1 for symbolic dimensions (the batch dimension included)

    @property
    def metadata_type(self) -> str:
        """The datatype as the KServe v2 metadata endpoint spells it (FP32, INT64, …)."""
        return self.data_type.removeprefix("TYPE_")


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...]

    @property
    def batched(self) -> bool:
        """Every input and output has a leading symbolic dimension: Triton can batch it."""
        return all(t.shape and t.shape[0] == -1 for t in (*self.inputs, *self.outputs))


def onnx_signature(onnx_path: str | Path) -> Signature:
    return signature_of(load_onnx(onnx_path), source=onnx_path)


def signature_of(model: onnx.ModelProto, *, source: str | Path) -> Signature:
    """The signature of a model already loaded (`source` names it in errors)."""
    initializers = {i.name for i in model.graph.initializer}

    def tensors(values: object) -> tuple[TensorSignature, ...]:
        result = []
        for value in values:  # type: ignore[attr-defined]
            if value.name in initializers:
                continue
            tensor = value.type.tensor_type
            if tensor.elem_type not in TRITON_TYPES:
                raise InputError(source, field=value.name, expected="a Triton-supported data type",
                                 found=f"ONNX elem_type {tensor.elem_type}")
            shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
            result.append(TensorSignature(value.name, TRITON_TYPES[tensor.elem_type], shape))
        return tuple(result)

    return Signature(inputs=tensors(model.graph.input), outputs=tensors(model.graph.output))


def config_pbtxt(name: str, signature: Signature, *, platform: Platform, max_batch_size: int,
                 dynamic_batching: bool, instance_kind: InstanceKind, instance_count: int) -> str:
    """Dims exclude the batch dimension when `max_batch_size > 0` (Triton adds it back). A tensor that is only
    the batch dimension (an id per sample, shape `[batch]`) has no per-sample dims, which Triton refuses: it
    is served as `dims: [ 1 ]` with `reshape: { shape: [ ] }` (Triton's documented form), so clients send and
    receive `[batch, 1]` while the model sees `[batch]` (`to_served`, `from_served`)."""
    if max_batch_size > 0 and not signature.batched:
        raise InputError(name, field="max_batch_size", expected="0 for a model without a symbolic batch dimension",
                         found=str(max_batch_size))

    def block(kind: str, tensors: tuple[TensorSignature, ...]) -> str:
        entries = []
        for t in tensors:
            dims = t.shape[1:] if max_batch_size > 0 else t.shape
            shape = "dims: [ 1 ] reshape: { shape: [ ] }" if not dims else f"dims: [ {', '.join(map(str, dims))} ]"
            entries.append(f'  {{ name: "{t.name}" data_type: {t.data_type} {shape} }}')
        return f"{kind} [\n" + ",\n".join(entries) + "\n]"

    engine = 'platform: "onnxruntime_onnx"' if platform == "onnxruntime_onnx" else 'backend: "python"'
    lines = [f'name: "{name}"', engine, f"max_batch_size: {max_batch_size}", block("input", signature.inputs),
             block("output", signature.outputs)]
    if dynamic_batching and max_batch_size > 0:
        lines.append("dynamic_batching { max_queue_delay_microseconds: 2000 }")
    lines.append(f"instance_group [ {{ kind: KIND_{instance_kind} count: {instance_count} }} ]")
    return "\n".join(lines) + "\n"


def to_served(feeds: Mapping[str, np.ndarray], config: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Model-shaped inputs as the deployment's inference API takes them: an input the config reshapes
    (`reshape: { shape: [ ] }`) is sent in its `dims` (`[batch] → [batch, 1]`)."""
    return {name: _reshaped(array, _api_dims(config, "input", name), config) for name, array in feeds.items()}


def from_served(outputs: Mapping[str, np.ndarray], config: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The inference API's outputs in the model's shapes: an output the config reshapes comes back as the
    model made it (`[batch, 1] → [batch]`)."""
    return {name: _reshaped(array, _model_dims(config, "output", name), config) for name, array in outputs.items()}


def _entry(config: Mapping[str, Any], kind: str, name: str) -> Mapping[str, Any] | None:
    return next((e for e in config.get(kind, []) if e.get("name") == name), None)


def _api_dims(config: Mapping[str, Any], kind: str, name: str) -> list[int] | None:
    entry = _entry(config, kind, name)
    return [int(d) for d in entry.get("dims", [])] if entry is not None and "reshape" in entry else None


def _model_dims(config: Mapping[str, Any], kind: str, name: str) -> list[int] | None:
    entry = _entry(config, kind, name)
    # the JSON form drops an empty repeated field: `reshape: { shape: [ ] }` reads as `"reshape": {}`
    return [int(d) for d in entry["reshape"].get("shape", [])] if entry is not None and "reshape" in entry else None


def _reshaped(array: np.ndarray, dims: list[int] | None, config: Mapping[str, Any]) -> np.ndarray:
    """`array` in `dims` per sample; as it is where it does not hold that many values (a server answering
    another shape: the comparison then reports the shapes, never a crash or a reshaped pass)."""
    if dims is None:
        return array
    batched = int(config.get("max_batch_size", 0)) > 0
    shape = (array.shape[0] if array.ndim else 1, *dims) if batched else tuple(dims)
    return array.reshape(shape) if -1 not in dims and array.size == np.prod(shape, dtype=np.int64) else array


@dataclass(frozen=True)
class WrittenModel:
    name: str
    version: int
    directory: Path
    onnx: Path
    sha256: str


def write_repository(onnx_path: str | Path, repository: str | Path, *, name: str, version: int = 1,
                     platform: Platform = "python", max_batch_size: int = 64, dynamic_batching: bool = True,
                     instance_kind: InstanceKind = "CPU", instance_count: int = 1,
                     signature: Signature | None = None) -> WrittenModel:
    """Write (or overwrite) one model of the repository; returns where the served file lives and its digest.
    `signature`: the model's, when the caller has already loaded it (saves parsing and checking it again)."""
    signature = signature or onnx_signature(onnx_path)
    written = write_version(onnx_path, repository, name=name, version=version)
    if platform == "python":
        shutil.copyfile(Path(__file__).with_name("python_backend_model.py"), written.onnx.parent / "model.py")
    (written.directory / "config.pbtxt").write_text(
        config_pbtxt(name, signature, platform=platform, max_batch_size=max_batch_size,
                     dynamic_batching=dynamic_batching, instance_kind=instance_kind, instance_count=instance_count),
        encoding="utf-8")
    return written


def write_version(onnx_path: str | Path, repository: str | Path, *, name: str, version: int) -> WrittenModel:
    """The version folder of one model, (re)created with the ONNX file and its digest beside it (what the probe's
    `served_artifact` check compares); the caller writes the backend's files and `config.pbtxt`."""
    model_dir = Path(repository) / name
    version_dir = model_dir / str(version)
    if version_dir.exists():
        shutil.rmtree(version_dir)
    version_dir.mkdir(parents=True)
    target = version_dir / "model.onnx"
    shutil.copyfile(onnx_path, target)
    sha = sha256_file(target)
    (version_dir / "model.onnx.sha256").write_text(f"{sha}  model.onnx\n", encoding="utf-8")
    return WrittenModel(name=name, version=version, directory=model_dir, onnx=target, sha256=sha)
