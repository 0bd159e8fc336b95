"""A three-block CNN for parity tests, exported the way skewgate exports, and planted ONNX defects."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from skewgate.export.core import export_model


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, *, norm: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout) if norm else nn.Identity()
        self.act = nn.GELU() if norm else nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class ThreeBlocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(1, 6, norm=True), Block(6, 8, norm=False), Block(8, 8, norm=True))
        self.head = nn.Linear(8 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x).flatten(1))


def build(directory: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    model = ThreeBlocks().train()
    with torch.no_grad():
        for seed in range(3):
            model(torch.from_numpy(np.random.default_rng(seed).normal(size=(32, 1, 8, 8)).astype(np.float32)))
    model.eval()
    x = np.random.default_rng(7).normal(size=(40, 1, 8, 8)).astype(np.float32)
    np.savez(directory / "inputs.npz", x=x)
    program = torch.export.export(model, (torch.from_numpy(x[:4]),),
                                  dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=1024)}})
    torch.export.save(program, str(directory / "model.pt2"))
    verdict = export_model(model=directory / "model.pt2", inputs=directory / "inputs.npz",
                           out=directory / "model.onnx")
    assert verdict.status == "pass", verdict.message
    return {"pt2": directory / "model.pt2", "onnx": directory / "model.onnx", "inputs": directory / "inputs.npz"}


def _node_by_scope(model: onnx.ModelProto, module: str, op_type: str) -> onnx.NodeProto:
    for node in model.graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), "")
        if f"'{module}'" in scopes and node.op_type == op_type:
            return node
    raise LookupError(f"no {op_type} node of {module}")


def _initializer(model: onnx.ModelProto, name: str) -> tuple[onnx.TensorProto, np.ndarray]:
    tensor = next(i for i in model.graph.initializer if i.name == name)
    return tensor, numpy_helper.to_array(tensor).copy()


def _replace(model: onnx.ModelProto, tensor: onnx.TensorProto, array: np.ndarray) -> None:
    tensor.CopyFrom(numpy_helper.from_array(array.astype(np.float32), tensor.name))


def plant(source: Path, target: Path, defect: str) -> Path:
    model = onnx.load(str(source))
    if defect == "tanh_gelu":  # the ONNX GELU of block 0 computes the tanh approximation
        node = _node_by_scope(model, "blocks.0.act", "Gelu")
        kept = [a for a in node.attribute if a.name != "approximate"]
        node.ClearField("attribute")
        node.attribute.extend([*kept, onnx.helper.make_attribute("approximate", "tanh")])
    elif defect == "bn_statistics":  # block 2's BatchNorm, folded into its Conv, with other running means
        node = _node_by_scope(model, "blocks.2.bn", "Conv")
        tensor, bias = _initializer(model, node.input[2])
        _replace(model, tensor, bias + 0.5)
    elif defect == "corrupted_weight":  # one weight of the middle block's conv
        node = _node_by_scope(model, "blocks.1.conv", "Conv")
        tensor, weight = _initializer(model, node.input[1])
        weight.flat[7] = 25.0
        _replace(model, tensor, weight)
    else:
        raise ValueError(defect)
    onnx.save(model, str(target))
    return target


def quantize(source: Path, target: Path, inputs: Path, *, break_value: str | None = None) -> Path:
    """INT8 QDQ with ONNX Runtime's quantiser; `break_value`: give that activation a scale 100× too large."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    arrays = np.load(inputs)
    names = [i.name for i in onnx.load(str(source)).graph.input]
    count = len(arrays[names[0]])

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{n: arrays[n][i : i + 8] for n in names} for i in range(0, count, 8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(str(source), str(target), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    if break_value is not None:
        model = onnx.load(str(target))
        node = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == break_value)
        tensor, scale = _initializer(model, node.input[1])
        _replace(model, tensor, scale * 100)
        onnx.save(model, str(target))
    return target


def plant_in_attention(source: Path, target: Path, module: str, defect: str) -> Path:
    """A defect inside `module`'s scaled-dot-product attention: `softmax_axis` normalises over the queries
    instead of the keys; `scale` multiplies the queries by twice the exporter's factor. (`bias`: any module whose
    Linear lowers to MatMul + Add or Gemm gets its bias shifted by 0.5.)"""
    model = onnx.load(str(source))
    scoped = [n for n in model.graph.node if any(p.key == "pkg.torch.onnx.name_scopes" and f"'{module}'" in p.value
                                                 for p in n.metadata_props)]
    if defect == "softmax_axis":
        node = next(n for n in scoped if n.op_type == "Softmax")
        node.ClearField("attribute")
        node.attribute.append(onnx.helper.make_attribute("axis", -2))
    elif defect == "bias":  # the first Add of the module (a Linear's bias) reads a shifted bias
        node = next(n for n in scoped if n.op_type in {"Add", "Gemm"})
        index = 1 if node.op_type == "Add" else 2
        _, bias = _initializer(model, node.input[index])
        model.graph.initializer.append(numpy_helper.from_array((bias + 0.5).astype(np.float32), "planted_bias"))
        node.input[index] = "planted_bias"
    elif defect == "scale":  # the scale initializer is shared (by both layers, too): give this Mul its own copy
        node = next(n for n in scoped if n.op_type == "Mul"
                    and any(i.name == n.input[1] and i.dims in ([], [1]) for i in model.graph.initializer))
        _, scale = _initializer(model, node.input[1])
        model.graph.initializer.append(numpy_helper.from_array((scale * 2).astype(np.float32), "planted_scale"))
        node.input[1] = "planted_scale"
    else:
        raise ValueError(defect)
    onnx.save(model, str(target))
    return target


class ClipStyle(torch.nn.Module):
    """A CLIP-style pair of towers, each ending in its L2-normalised embedding: an image tower (flatten, MLP) and
    a text tower (token embedding, mean pool, projection)."""

    def __init__(self) -> None:
        super().__init__()
        self.image = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 32), torch.nn.GELU(),
                                         torch.nn.Linear(32, 16))
        self.tokens = torch.nn.Embedding(50, 32)
        self.text = torch.nn.Linear(32, 16)

    def forward(self, image: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        image_embedding = torch.nn.functional.normalize(self.image(image), dim=-1)
        text_embedding = torch.nn.functional.normalize(self.text(self.tokens(ids).mean(dim=1)), dim=-1)
        return image_embedding, text_embedding


def save_clip_style(directory: Path, name: str, *, text_seed: int | None = None,
                    samples: int = 64) -> dict[str, Path]:
    """The seeded CLIP-style model as `<name>.pt2` (dynamic batch), its skewgate export and its inputs (`image`,
    `ids`); `text_seed`: the text projection drawn from another seed (a stale text tower)."""
    torch.manual_seed(0)
    model = ClipStyle().eval()
    if text_seed is not None:
        torch.manual_seed(text_seed)
        model.text.reset_parameters()
    rng = np.random.default_rng(0)
    feeds = {"image": rng.normal(size=(samples, 3, 8, 8)).astype(np.float32),
             "ids": rng.integers(0, 50, size=(samples, 6)).astype(np.int64)}
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, tuple(torch.from_numpy(v[:4]) for v in feeds.values()),
                                  dynamic_shapes={k: {0: batch} for k in feeds})
    directory.mkdir(parents=True, exist_ok=True)
    files = {"pt2": directory / f"{name}.pt2", "inputs": directory / f"{name}.npz", "onnx": directory / f"{name}.onnx"}
    torch.export.save(program, str(files["pt2"]))
    np.savez(files["inputs"], **feeds)
    verdict = export_model(model=files["pt2"], inputs=files["inputs"], out=files["onnx"])
    assert verdict.status == "pass", verdict.message
    return files


def fp16_deployment(onnx_path: Path, out: Path) -> Path:
    """The FP16 conversion a deployment serves (float inputs and outputs kept FP32, everything between — the
    normalisations included — in FP16), as `parity --fp16` converts it."""
    from skewgate.parity.internals.fp16 import convert

    onnx.save(convert(onnx.load(str(onnx_path)), keep_fp32=[]), str(out))
    return out
