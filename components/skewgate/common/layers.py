"""The layerwise machinery: record chosen intermediates of the PyTorch program, expose those of an ONNX model.

Which value pairs with which is parity's business (`parity/internals/matching.py`: by provenance, never by name). The
ONNX side exposes its intermediates as extra graph outputs; the PyTorch side returns them beside its outputs.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    values someone compares (a batch of every intermediate is most of parity's memory).

    Each value is returned as it was when produced: `torch.export` keeps in-place ATen ops (`relu_`, `add_`,
    `silu_` from `inplace=True` modules), which overwrite a tensor the graph produced earlier, so a value read at
    the end of the graph may be a later op's. The rewrite clones each kept value right after the node that makes
    it (one copy per kept value and batch: the memory parity holds anyway)."""

    def __init__(self, program: torch.export.ExportedProgram) -> None:

        self._program = program
        graph = program.graph
        self.order = [n.name for n in graph.nodes if n.op == "call_function"]
        tensors = [n for n in graph.nodes if n.op == "call_function" and value_dims(n.meta.get("val")) is not None]
        self.recorded = [n.name for n in tensors]  # what can be recorded
        self.modules = {n.name: _innermost_module(n) for n in tensors}
        self.module_types = {n.name: _innermost_module_type(n) for n in tensors}
        self._kept: list[str] = []
        self.module: torch.fx.GraphModule | None = None
        self._float64: torch.fx.GraphModule | None = None

    def record(self, names: Collection[str]) -> None:
        import torch

        module = self._program.module()
        graph = module.graph
        output = next(n for n in graph.nodes if n.op == "output")
        leaves = torch.utils._pytree.tree_leaves(output.args[0])
        self.outputs = len(leaves)
        kept = [n for n in graph.nodes if n.name in names and n.name in self.modules]
        self._kept = [n.name for n in kept]
        snapshots = []
        for node in kept:  # the value as produced, before any later in-place op writes into it
            with graph.inserting_after(node):
                snapshots.append(graph.call_function(torch.ops.aten.clone.default, (node,)))
        with graph.inserting_before(output):
            graph.output((*leaves, *snapshots))
        graph.erase_node(output)
        graph._codegen = torch.fx.graph.CodeGen()  # flat in, flat out: drop the pytree (un)flattening codegen
        module.recompile()
        self.module = module
        self._float64 = None

    def run(self, feeds: dict[str, np.ndarray], *, float64: bool = False,
            ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """The outputs and the kept values; `float64`: the same program computed in float64 (see
        `float64_module`), fed the same values widened, as a reference for float32 rounding."""
        import torch

        if self.module is None:
            raise RuntimeError("TorchRecorder.run before record(names)")
        module = self.module
        if float64:
            self._float64 = self._float64 or float64_module(self.module)
            module = self._float64
        tensors = [torch.from_numpy(np.ascontiguousarray(widen(a) if float64 else a)) for a in feeds.values()]
        with torch.no_grad():
            # the rewritten graph returns a flat tuple: the outputs, then every kept intermediate
            result = module.forward(*tensors)
        arrays = [t.detach().cpu().numpy() for t in result]
        return arrays[: self.outputs], dict(zip(self._kept, arrays[self.outputs :], strict=True))


def float64_module(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `module` that computes in float64: float32 weights and buffers widened, and every float32
    dtype the graph names (`full`, `arange`, `_to_copy`, …) made float64, so no op narrows back. Integer and
    boolean values are left as they are. May raise where an op has no float64 kernel: callers fall back."""
    import copy

    import torch

    wide = copy.deepcopy(module)
    for holder in wide.modules():
        for name, tensor in [*holder.named_parameters(recurse=False), *holder.named_buffers(recurse=False)]:
            if tensor is not None and tensor.dtype == torch.float32:
                setattr(holder, name, torch.nn.Parameter(tensor.detach().double(), requires_grad=False)
                        if isinstance(tensor, torch.nn.Parameter) else tensor.double())
        for name, value in list(vars(holder).items()):  # constants held as plain attributes by get_attr
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32 and not name.startswith("_"):
                setattr(holder, name, value.double())

    def widen(value: object) -> object:
        return torch.float64 if value is torch.float32 else value

    for node in wide.graph.nodes:
        if node.op == "call_function":
            node.args = tuple(widen(a) for a in node.args)
            node.kwargs = {k: widen(v) for k, v in node.kwargs.items()}
    wide.recompile()
    # An op that makes a float from integers without naming a dtype (sqrt of an int64 position, true division)
    # takes torch's default dtype: float32 there, float64 here, or the copy narrows back (deberta's relative
    # positions did, and its `_assert_tensor_metadata(dtype=float64)` refused the float32 it met)
    narrow_forward = wide.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return narrow_forward(*args, **kwargs)
        finally:
            torch.set_default_dtype(previous)

    wide.forward = forward
    return wide


def widen(array: np.ndarray) -> np.ndarray:
    """A float32 input as float64 (the float64 reference's feed); any other dtype as it is."""
    return array.astype(np.float64) if array.dtype == np.float32 else array


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


def _innermost_module_type(node: torch.fx.Node) -> str:
    """The class name of the innermost module (`BatchNorm2d`), from `nn_module_stack`'s qualified type."""
    stack = [(path, cls) for path, cls in (node.meta.get("nn_module_stack") or {}).values() if path]
    if not stack:
        return ""
    cls = stack[-1][1]
    name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return name.rsplit(".", 1)[-1].strip("'>")


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
