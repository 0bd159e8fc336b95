"""The layerwise machinery: record chosen intermediates of the PyTorch program, expose those of an ONNX model.

Which value pairs with which is `matching.py`'s business (by provenance, never by name). The ONNX side exposes
its intermediates as extra graph outputs; the PyTorch side returns them beside its outputs.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx
    import torch


@dataclass(frozen=True)
class OnnxValue:
    """One ONNX value with where it comes from: the producing node, its op type and the nn.Module path."""

    name: str
    node: str
    op_type: str
    module: str
    inputs: tuple[str, ...]
    depth: int  # position in topological order


def onnx_values(model: onnx.ModelProto) -> dict[str, OnnxValue]:
    """Every node output, in topological order (the order ONNX requires of `graph.node`)."""
    values = {}
    for depth, node in enumerate(model.graph.node):
        meta = {p.key: p.value for p in node.metadata_props}
        for output in node.output:
            if output:
                values[output] = OnnxValue(output, node.name, node.op_type, module_path(meta), tuple(node.input),
                                           depth)
    return values


def module_path(meta: dict[str, str]) -> str:
    """The innermost `nn.Module` path of an ONNX node, from the exporter's `name_scopes` metadata."""
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if not scopes:
        return "<root>"
    try:
        parts = [p for p in ast.literal_eval(scopes) if p]
    except (ValueError, SyntaxError):
        return scopes
    # scopes run from the root module to the op, each a full module path ('features', 'features.2', 'gelu'):
    # the one before the op is the innermost nn.Module
    return parts[-2] if len(parts) >= 2 else "<root>"


def with_intermediates(model: onnx.ModelProto, names: list[str] | None = None) -> onnx.ModelProto:
    """A copy of `model` whose graph also outputs every intermediate value with a known type (or `names`)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(copy)
    typed = {v.name: v for v in (*inferred.graph.value_info, *copy.graph.value_info)}
    present = {o.name for o in copy.graph.output}
    wanted = names if names is not None else [o for n in copy.graph.node for o in n.output if o]
    for name in wanted:
        if name not in present and name in typed:
            copy.graph.output.append(typed[name])
            present.add(name)
    return copy


class TorchRecorder:
    """Runs the program and returns chosen call_function outputs, keyed by FX node name.

    Reading the graph (`order`, `recorded`, `modules`) is separate from `record(names)`, which rewrites it once
    to return those intermediates beside its outputs, so each batch is one compiled forward that keeps only the
    values someone compares (a batch of every intermediate is most of parity's memory)."""

    def __init__(self, program: torch.export.ExportedProgram) -> None:

        self._program = program
        graph = program.graph
        self.order = [n.name for n in graph.nodes if n.op == "call_function"]
        tensors = [n for n in graph.nodes if n.op == "call_function" and value_dims(n.meta.get("val")) is not None]
        self.recorded = [n.name for n in tensors]  # what can be recorded
        self.modules = {n.name: _innermost_module(n) for n in tensors}
        self._kept: list[str] = []
        self.module: torch.fx.GraphModule | None = None

    def record(self, names: Collection[str]) -> None:
        import torch

        module = self._program.module()
        graph = module.graph
        output = next(n for n in graph.nodes if n.op == "output")
        leaves = torch.utils._pytree.tree_leaves(output.args[0])
        self.outputs = len(leaves)
        kept = [n for n in graph.nodes if n.name in names and n.name in self.modules]
        self._kept = [n.name for n in kept]
        with graph.inserting_before(output):
            graph.output((*leaves, *kept))
        graph.erase_node(output)
        graph._codegen = torch.fx.graph.CodeGen()  # flat in, flat out: drop the pytree (un)flattening codegen
        module.recompile()
        self.module = module

    def run(self, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        import torch

        if self.module is None:
            raise RuntimeError("TorchRecorder.run before record(names)")
        tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()]
        with torch.no_grad():
            # the rewritten graph returns a flat tuple: the outputs, then every kept intermediate
            result = self.module.forward(*tensors)
        arrays = [t.detach().cpu().numpy() for t in result]
        return arrays[: self.outputs], dict(zip(self._kept, arrays[self.outputs :], strict=True))


def value_dims(val: object) -> tuple[int | None, ...] | None:
    """The shape of a node's `meta["val"]` (symbolic sizes as None), or None when the value is not a tensor:
    a fake tensor from `torch.export.load` or a `ValueMeta` from `pt2_graph`."""
    import torch

    from skewgate.common.pt2_graph import ValueMeta

    if isinstance(val, ValueMeta):
        return val.shape
    if isinstance(val, torch.Tensor):
        return tuple(d if isinstance(d, int) else None for d in val.shape)
    return None


def _innermost_module(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    paths = [path for path, _cls in stack.values() if path]
    return paths[-1] if paths else "<root>"


def quantized_counterparts(fp32: Iterable[str], int8: Collection[str]) -> dict[str, str]:
    """Match values across the Q/DQ nodes: an FP32 value `v` is compared with what the INT8 graph hands on,
    `v_DequantizeLinear_Output` when `v` was quantised (the quantiser may even fuse the op that made `v`, such as
    a Relu whose clipping the quantised range does), else `v` itself."""
    pairs = {}
    for name in fp32:
        dequantized = f"{name}_DequantizeLinear_Output"
        if dequantized in int8:
            pairs[dequantized] = name
        elif name in int8:
            pairs[name] = name
    return pairs
