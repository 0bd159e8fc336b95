"""Layerwise FP32 parity on architectures from torchvision, transformers and timm (tests/library_zoo.py): every
faithful export passes with its values paired by shape and dtype, and defects planted in the ONNX graph are
localised to the node that was changed, each on two models."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from skewgate.common.layers import module_path
from skewgate.parity.core import ParityOptions, parity
from tests.library_zoo import ZOO

LAYERWISE = ParityOptions(layerwise=True, batch_size=6)


def _parity(files, onnx_path):
    return parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, options=LAYERWISE)


@pytest.mark.parametrize("name", list(ZOO))
def test_faithful_export_of_a_library_model_passes_layer_by_layer(library_zoo, name):
    files, onnx_path, _ = library_zoo(name)
    result = _parity(files, onnx_path)
    assert result.verdict.status == "pass", result.verdict.message
    coverage = result.verdict.details["torch_vs_fp32"]["coverage"]
    assert coverage["matched"] >= 10
    assert coverage["shape_mismatches"] == {}
    rows = result.layers["torch_vs_fp32"]
    assert all(row["module_type"] for row in rows if row["module"] != "<root>")
    assert result.verdict.details["rounding"]["layers"]["method"] == "float64 reference"


def _tanh_gelu(model: onnx.ModelProto) -> onnx.NodeProto:
    """The first erf GELU now computes the tanh approximation (the export-time GELU swap)."""
    node = next(n for n in model.graph.node if n.op_type == "Gelu")
    node.ClearField("attribute")
    node.attribute.extend([onnx.helper.make_attribute("approximate", "tanh")])
    return node


def _corrupted_weight(model: onnx.ModelProto) -> onnx.NodeProto:
    """One weight of the third Conv / Gemm / MatMul that has a weight set to a large value."""
    initializers = {i.name: i for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and n.input[1] in initializers]
    node = nodes[2]
    tensor = initializers[node.input[1]]
    weight = numpy_helper.to_array(tensor).copy()
    weight.flat[weight.size // 2] = 25.0 * float(np.abs(weight).max())
    tensor.CopyFrom(numpy_helper.from_array(weight, tensor.name))
    return node


@pytest.mark.parametrize(
    ("name", "plant"),
    [
        pytest.param("bert", _tanh_gelu, id="bert-gelu-switched-to-tanh"),
        pytest.param("vit", _tanh_gelu, id="vit-gelu-switched-to-tanh"),
        pytest.param("resnet18", _corrupted_weight, id="resnet18-one-corrupted-weight"),
        pytest.param("convnext", _corrupted_weight, id="convnext-one-corrupted-weight"),
        pytest.param("lraspp", _corrupted_weight, id="lraspp-segmentation-one-corrupted-weight"),
    ],
)
def test_defect_planted_in_a_library_model_is_localised(library_zoo, tmp_path: Path, name, plant):
    files, onnx_path, _ = library_zoo(name)
    model = onnx.load(str(onnx_path))
    node = plant(model)
    planted = tmp_path / "planted.onnx"
    onnx.save(model, str(planted))
    result = _parity(files, planted)
    assert result.verdict.status == "fail"
    first = result.verdict.details["torch_vs_fp32"]["first_divergence"]
    assert first["node"] == node.name, first
    assert "introduced here" in first["isolated"], first["isolated"]


def _weight_in(module: str) -> Callable[[onnx.ModelProto], onnx.NodeProto]:
    """One weight of the first MatMul / Gemm inside `module` (its path, as the exporter records it) set large."""

    def plant(model: onnx.ModelProto) -> onnx.NodeProto:
        initializers = {i.name: i for i in model.graph.initializer}
        node = next(n for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in initializers
                    and module_path({p.key: p.value for p in n.metadata_props}).startswith(module))
        tensor = initializers[node.input[1]]
        weight = numpy_helper.to_array(tensor).copy()
        weight.flat[weight.size // 2] = 25.0 * float(np.abs(weight).max())
        tensor.CopyFrom(numpy_helper.from_array(weight, tensor.name))
        return node

    return plant


@pytest.mark.parametrize(
    ("name", "module"),
    [
        # the exporter computes the attention mask once and every later layer reads layer 0's copy
        pytest.param("bert", "bert.encoder.layer.1.", id="bert-layer-1"),
        pytest.param("llama", "llama.model.layers.1.", id="llama-layer-1"),
        pytest.param("clip_vision", "clip.vision_model.encoder.layers.1.", id="clip-embedding-tower-layer-1"),
        # the shifted window's mask: built from a shape in PyTorch, a constant in ONNX
        pytest.param("swin", "features.3.1.", id="swin-last-shifted-block"),
    ],
)
def test_a_defect_in_a_later_transformer_layer_is_named_in_that_layer(library_zoo, tmp_path: Path, name, module):
    files, onnx_path, _ = library_zoo(name)
    model = onnx.load(str(onnx_path))
    node = _weight_in(module)(model)
    planted = tmp_path / "planted.onnx"
    onnx.save(model, str(planted))
    result = _parity(files, planted)
    first = result.verdict.details["torch_vs_fp32"]["first_divergence"]
    # the Linear's value (the MatMul is inside its lowering), in the module of the planted node
    assert result.verdict.status == "fail" and first["module"].startswith(module), first
    assert module_path({p.key: p.value for p in node.metadata_props}) == first["module"], first
    assert "introduced here" in first["isolated"], first["isolated"]
    by_module = result.verdict.details["torch_vs_fp32"]["coverage"]["by_module"]
    layer = {m: c for m, c in by_module.items() if m.startswith(module)}
    assert sum(c["paired"] for c in layer.values()) > sum(c["unpaired"] for c in layer.values()), layer
