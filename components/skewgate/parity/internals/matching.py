"""Pair ONNX values with the PyTorch program's values by provenance, never by name.

The dynamo exporter decomposes the program before lowering it, and numbers the decomposed graph's nodes afresh:
its `view_1` may be the program's `view`. Each ONNX node carries the FX node it lowers
(`pkg.torch.onnx.fx_node`: name, op target, argument values) and the modules it sits in
(`pkg.torch.onnx.name_scopes`). An FX node's ONNX nodes form a *group*; the group's value is the one handed on
to other groups. Matching is by structure:

1. **Same op on the same inputs.** Walking both graphs in order, a group pairs with the program node that has
   the same op target, the same constant arguments, and the same *frontier*: the nearest already-paired values
   (or graph inputs) upstream, looking through values neither side pairs (the exporter's rewrites, aliases
   such as eval-mode dropout, shape arithmetic). Ties (identical ops on identical inputs) go by order.
2. **Same consumer.** A rewritten op (`unflatten` lowered as `view`, BatchNorm as
   `_native_batch_norm_legit_no_training`) has no same-op twin, but when a paired consumer has exactly one
   unpaired input on each side, with the same shape, those two are the same value. Applied upstream as far
   as it holds.

Identical program ops (the same op on the same inputs, which the exporter merges into one ONNX value: a
transformer's attention-mask `Where` computed once per layer in PyTorch, once for all layers in ONNX) are one
value to both rules: frontiers name the first of them, and the ONNX value pairs with the first and stands for the
others (`Matching.merged`). Program values made from another value's shape only (`new_zeros`, `zeros_like`:
a shifted-window mask) do not depend on the inputs' values, as the ONNX constant they become does not.

Every ONNX value ends up paired, or unpaired with the reason; every program value without an ONNX twin is
listed as removed (folded, fused, or an alias the exporter dropped), or as merged into the value of its twin.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skewgate.common.layers import module_path, value_dims

if TYPE_CHECKING:
    import onnx
    import torch

_REF = re.compile(r"%[A-Za-z_][A-Za-z0-9_]*")
_TARGET = re.compile(r"target=([^\]]+)\]")
# ONNX ops whose output depends on the input's shape only, never on its values
_SHAPE_OPS = {"Shape", "Size", "ConstantOfShape", "Constant"}
# program ops likewise (aten names, overload left off)
_SHAPE_TARGETS = {"aten.new_zeros", "aten.new_ones", "aten.new_empty", "aten.new_full", "aten.zeros_like",
                  "aten.ones_like", "aten.empty_like", "aten.full_like", "aten.sym_size", "aten.size"}
# program ops two copies of which on the same inputs differ: never merged
_RANDOM = re.compile(r"rand|dropout|bernoulli|normal|uniform|multinomial|empty|exponential")


@dataclass
class Matching:
    pairs: dict[str, str] = field(default_factory=dict)  # ONNX value → program node
    how: dict[str, str] = field(default_factory=dict)  # ONNX value → "same op and inputs" | "same consumer"
    unmatched: dict[str, str] = field(default_factory=dict)  # ONNX value → why it has no PyTorch twin
    removed: dict[str, str] = field(default_factory=dict)  # program node → its op: no ONNX twin
    merged: dict[str, str] = field(default_factory=dict)  # program node → the ONNX value of its identical twin
    modules: dict[str, str] = field(default_factory=dict)  # removed or merged program node → its module
    lowering: dict[str, list[int]] = field(default_factory=dict)  # paired value → its op's ONNX nodes (indices)


@dataclass
class _Group:
    name: str  # the exporter's FX node name
    target: str
    skeleton: str  # the arguments with node references blanked: the constants that must agree
    module: str
    nodes: list[int]  # indices into graph.node
    value: str | None = None


def describe_fx(text: str) -> tuple[str, str, str]:
    """(name, op target, argument skeleton) of an FX node as `Node.format_node()` prints it."""
    name = text.split(" ", 1)[0].lstrip("%")
    found = _TARGET.search(text)
    target = _functional(found.group(1).removeprefix("torch.ops.")) if found else "?"
    arguments = text.split("](", 1)[1] if "](" in text else ""
    return name, target, _REF.sub("%", arguments)


def _functional(target: str) -> str:
    """An in-place ATen op as its functional twin (`aten.relu_.default` → `aten.relu.default`): `torch.export`
    keeps the in-place op where the module had `inplace=True`, the exporter lowers the functional one, and both
    compute the same value."""
    namespace, _, rest = target.partition(".")
    op, dot, overload = rest.partition(".")
    if namespace == "aten" and op.endswith("_") and not op.startswith("_"):
        return f"{namespace}.{op[:-1]}{dot}{overload}"
    return target


def _in_place(target: object) -> bool:
    """An ATen op that writes into its input (`aten.add_.Tensor`): two of them on one input are not one value."""
    parts = str(target).split(".")
    return len(parts) == 3 and parts[0] == "aten" and parts[1].endswith("_") and not parts[1].startswith("_")


def _dims(value_info: Any) -> tuple[int | None, ...] | None:
    tensor = value_info.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)


def _dtype(value_info: Any) -> str | None:
    import onnx

    elem_type = value_info.type.tensor_type.elem_type
    return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type)) if elem_type else None


def _compatible(a: tuple[int | None, ...] | None, b: tuple[int | None, ...] | None) -> bool:
    """Same rank and the same size wherever both are static (symbolic sizes agree with anything)."""
    if a is None or b is None:
        return a is None and b is None
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))


def _value_dtype(val: object) -> str | None:
    """A program value's dtype as numpy names it (`float32`), or None when unknown."""
    dtype = getattr(val, "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None


class _Program:
    """The PyTorch side: every call_function node with its op, constants, tensor inputs and shape."""

    def __init__(self, program: torch.export.ExportedProgram, recordable: Iterable[str]) -> None:

        graph = program.graph
        user_inputs = set(program.graph_signature.user_inputs)
        self.order: list[str] = []
        self.inputs: dict[str, list[str]] = {}  # node → data-dependent node arguments
        self.key: dict[str, tuple[str, str]] = {}
        self.shape: dict[str, tuple[int | None, ...] | None] = {}
        self.dtype: dict[str, str | None] = {}
        self.module: dict[str, str] = {}
        self.data: set[str] = set()  # nodes whose value depends on the user inputs' values
        self.first: dict[str, str] = {}  # node → the first node computing the same op on the same inputs
        seen: dict[tuple[str, str, tuple[str, ...]], str] = {}
        self.user_inputs = user_inputs
        self.recordable = set(recordable)
        for node in graph.nodes:
            if node.op == "placeholder" and node.name in user_inputs:
                self.data.add(node.name)
            if node.op != "call_function":
                continue
            _, target, skeleton = describe_fx(node.format_node())
            shape_only = target.rsplit(".", 1)[0] in _SHAPE_TARGETS
            args = [a.name for a in node.all_input_nodes if a.name in self.data and not shape_only]
            val = node.meta.get("val")
            dims = value_dims(val)
            if args and (dims is not None or isinstance(val, (tuple, list))):
                self.data.add(node.name)
            self.order.append(node.name)
            self.inputs[node.name] = args
            self.key[node.name] = (target, skeleton)
            if not _RANDOM.search(target) and not _in_place(node.target):
                twin = (target, skeleton, tuple(self.first.get(a.name, a.name) for a in node.all_input_nodes))
                self.first[node.name] = seen.setdefault(twin, node.name)
            paths = [path for path, _cls in (node.meta.get("nn_module_stack") or {}).values() if path]
            self.module[node.name] = paths[-1] if paths else "<root>"
            self.shape[node.name] = dims
            self.dtype[node.name] = _value_dtype(val)

    def frontier(self, name: str, pairs_back: dict[str, str], memo: dict[str, frozenset[str]]) -> frozenset[str]:
        """The nearest paired nodes (or user inputs) upstream of `name`'s inputs."""
        if name in memo:
            return memo[name]
        found: set[str] = set()
        for arg in self.inputs.get(name, []):
            first = self.first.get(arg, arg)
            if first in pairs_back or arg in self.user_inputs:
                found.add(first)
            else:
                found |= self.frontier(arg, pairs_back, memo)
        memo[name] = frozenset(found)
        return memo[name]


class _Onnx:
    """The ONNX side: each FX node's group of ONNX nodes and the value it hands on, which values depend on the
    inputs' values, and each value's producer, shape and dtype."""

    def __init__(self, model: onnx.ModelProto) -> None:
        import onnx

        graph = model.graph
        self.graph = graph
        initializers = {i.name for i in graph.initializer}
        self.inputs = {i.name for i in graph.input if i.name not in initializers}
        self.outputs = {o.name for o in graph.output}
        inferred = onnx.shape_inference.infer_shapes(model)
        typed = (*inferred.graph.value_info, *graph.value_info, *graph.output)
        self.shapes = {v.name: _dims(v) for v in typed}
        self.dtypes = {v.name: _dtype(v) for v in typed}
        self.groups: dict[str, _Group] = {}
        self.producer: dict[str, int] = {}  # value → node index
        self.group_of: dict[int, str] = {}
        self.data: set[str] = set(self.inputs)  # values that depend on the inputs' values
        for index, node in enumerate(graph.node):
            meta = {p.key: p.value for p in node.metadata_props}
            for out in node.output:
                self.producer[out] = index
            if node.op_type not in _SHAPE_OPS and any(i in self.data for i in node.input):
                self.data.update(o for o in node.output if o)
            text = meta.get("pkg.torch.onnx.fx_node")
            if text is None:
                continue
            name, target, skeleton = describe_fx(text)
            group = self.groups.setdefault(name, _Group(name, target, skeleton, module_path(meta), []))
            group.nodes.append(index)
            self.group_of[index] = name
        self._find_group_values()

    def _find_group_values(self) -> None:
        """A group's value: the data-dependent value named as its FX node, else the one data-dependent value it
        hands on (to another group, or as a graph output); none otherwise."""
        graph = self.graph
        consumers: dict[str, set[str]] = {}
        for index, node in enumerate(graph.node):
            for value in node.input:
                consumers.setdefault(value, set()).add(self.group_of.get(index, f"#{index}"))
        for group in self.groups.values():
            produced = [o for i in group.nodes for o in graph.node[i].output if o and o in self.data]
            handed_on = [v for v in produced if v in self.outputs or consumers.get(v, set()) - {group.name}]
            if group.name in produced:
                group.value = group.name
            elif len(handed_on) == 1:
                group.value = handed_on[0]

    def group_inputs(self, name: str) -> list[str]:
        """The data-dependent values a group reads from outside itself, in order."""
        own = set(self.groups[name].nodes)
        seen = []
        for index in self.groups[name].nodes:
            for value in self.graph.node[index].input:
                if value in self.data and (self.producer.get(value) not in own) and value not in seen:
                    seen.append(value)
        return seen


def _same_kind(onnx_side: _Onnx, value: str, torch_side: _Program, node: str) -> bool:
    """A pair must hold values of one shape and dtype: an in-place op or a view can make a program node's
    neighbour look like the right twin (MobileViT's unfolded patches paired with their image)."""
    if not _compatible(onnx_side.shapes.get(value), torch_side.shape.get(node)):
        return False
    onnx_dtype, torch_dtype = onnx_side.dtypes.get(value), torch_side.dtype.get(node)
    return onnx_dtype is None or torch_dtype is None or onnx_dtype == torch_dtype


def match(model: onnx.ModelProto, program: torch.export.ExportedProgram, recordable: Iterable[str]) -> Matching:
    """Pair `model`'s values with `program`'s recordable nodes (see the module docstring)."""
    torch_side = _Program(program, recordable)
    onnx_side = _Onnx(model)
    by_key: dict[tuple[str, str], list[str]] = {}
    for name in torch_side.order:
        if name in torch_side.recordable and name in torch_side.data:
            by_key.setdefault(torch_side.key[name], []).append(name)
    result = Matching()
    back: dict[str, str] = {}  # program node → the ONNX value paired with it
    _pair_same_op(result, back, onnx_side, torch_side, by_key)
    _pair_by_consumer(result, back, onnx_side, torch_side)
    graph, producer, group_of, groups = onnx_side.graph, onnx_side.producer, onnx_side.group_of, onnx_side.groups
    for value in result.pairs:
        owner = group_of.get(producer[value])
        result.lowering[value] = _ancestors_within(graph, value, groups[owner].nodes if owner else [producer[value]],
                                                   producer)
    for index, node in enumerate(graph.node):
        for value in node.output:
            if value and value not in result.pairs:
                result.unmatched[value] = _why(value, index, group_of, groups, onnx_side.data, onnx_side.outputs,
                                               by_key)
    for name in torch_side.order:
        if name not in back and name in torch_side.recordable and name in torch_side.data:
            twin = back.get(torch_side.first.get(name, name))
            result.modules[name] = torch_side.module[name]
            if twin is not None:
                result.merged[name] = twin
            else:
                result.removed[name] = torch_side.key[name][0]
    return result


def _pair_same_op(result: Matching, back: dict[str, str], onnx_side: _Onnx, torch_side: _Program,
                  by_key: dict[tuple[str, str], list[str]]) -> None:
    """Rule 1, group by group in the order their values are made: the unpaired program node with the group's op
    target, constants and frontier, of the same kind (`_same_kind`); ties go to the group's module, then order."""
    graph, producer, group_of, groups = onnx_side.graph, onnx_side.producer, onnx_side.group_of, onnx_side.groups
    front: dict[str, frozenset[str]] = {}  # ONNX value → the program nodes / inputs it derives from

    def frontier_of_value(value: str) -> frozenset[str]:
        if value in front:
            return front[value]
        if value in onnx_side.inputs:
            front[value] = frozenset({value})
            return front[value]
        index = producer.get(value)
        found: set[str] = set()
        if index is not None:
            owner = group_of.get(index)
            # a value inside another op's lowering (the exporter merged this op's copy of it there: the float
            # mask an attention lowering makes from a boolean one) stands for its own inputs, not for that op
            if owner is not None and owner in groups and groups[owner].value == value and value in result.pairs:
                paired = result.pairs[value]
                found.add(torch_side.first.get(paired, paired))
            else:
                for upstream in graph.node[index].input:
                    if upstream in onnx_side.data:
                        found |= frontier_of_value(upstream)
        front[value] = frozenset(found)
        return front[value]

    ordered = sorted((g for g in groups.values() if g.value is not None), key=lambda g: producer[g.value])  # type: ignore[index]
    for group in ordered:
        value = group.value
        assert value is not None
        wanted = frozenset().union(*(frontier_of_value(v) for v in onnx_side.group_inputs(group.name)))
        memo: dict[str, frozenset[str]] = {}
        candidates = [n for n in by_key.get((group.target, group.skeleton), [])
                      if n not in back and torch_side.frontier(n, back, memo) == wanted
                      and _same_kind(onnx_side, value, torch_side, n)]
        if candidates:
            same_module = [n for n in candidates if torch_side.module[n] == group.module]
            chosen = (same_module or candidates)[0]
            result.pairs[value], result.how[value] = chosen, "same op and inputs"
            back[chosen] = value


def _ancestors_within(graph: Any, value: str, nodes: list[int], producer: dict[str, int]) -> list[int]:
    """The nodes among `nodes` that `value` depends on (itself included), in graph order."""
    allowed, kept, todo = set(nodes), set(), [producer[value]]
    while todo:
        index = todo.pop()
        if index in kept or index not in allowed:
            continue
        kept.add(index)
        todo += [producer[i] for i in graph.node[index].input if i in producer]
    return sorted(kept)


def _pair_by_consumer(result: Matching, back: dict[str, str], onnx_side: _Onnx, torch_side: _Program) -> None:
    """Rule 2: a paired consumer with exactly one unpaired input on each side, of the same shape and dtype, made
    inside the same module. The module matters where the exporter folds ops: ShuffleNet's Conv → BatchNorm →
    Conv → BatchNorm lowers to two Convs with the BatchNorms folded in, so the second one reads the first
    BatchNorm's value (module `branch1.1`), not the program's second conv2d (`branch1.2`), of the same shape."""
    groups, producer, group_of = onnx_side.groups, onnx_side.producer, onnx_side.group_of
    work = list(result.pairs.items())
    while work:
        value, node = work.pop()
        owner = group_of.get(producer[value])
        if owner is None:
            continue
        onnx_inputs = []
        for upstream in onnx_side.group_inputs(owner):
            upstream_owner = group_of.get(producer.get(upstream, -1))
            if upstream in result.pairs or upstream_owner is None:
                continue
            if groups[upstream_owner].value == upstream:
                onnx_inputs.append(upstream)
        torch_inputs = [a for a in torch_side.inputs.get(node, []) if torch_side.first.get(a, a) not in back
                        and a in torch_side.data and a not in torch_side.user_inputs]
        if len(onnx_inputs) != 1 or len(torch_inputs) != 1:
            continue
        (onnx_value,), (torch_node,) = onnx_inputs, torch_inputs
        if torch_node not in torch_side.recordable or not _same_kind(onnx_side, onnx_value, torch_side, torch_node):
            continue
        modules = {groups[group_of[producer[onnx_value]]].module, torch_side.module[torch_node]}
        if len(modules - {"<root>"}) > 1:
            continue
        result.pairs[onnx_value], result.how[onnx_value] = torch_node, "same consumer"
        back[torch_node] = onnx_value
        work.append((onnx_value, torch_node))


def _why(value: str, index: int, group_of: dict[int, str], groups: dict[str, _Group], data: set[str],
         outputs: set[str], by_key: dict[tuple[str, str], list[str]]) -> str:
    if value in outputs:
        return "final output: compared as such"
    if value not in data:
        return "shape arithmetic: does not depend on the inputs' values"
    owner = group_of.get(index)
    if owner is None:
        return "no FX node: made by the ONNX optimiser"
    group = groups[owner]
    if group.value != value:
        return f"inside an op's lowering: {group.target} ({owner}, module {group.module}); PyTorch has no such value"
    if (group.target, group.skeleton) not in by_key:
        return (f"exporter rewrite: {group.target} ({owner}, module {group.module}); no program op with that target "
                "and those arguments, and no paired consumer pins it")
    return f"no twin: no program op {group.target} reads the same inputs ({owner}, module {group.module})"
