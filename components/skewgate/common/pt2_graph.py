"""A `.pt2`'s graph read straight from the archive's JSON into a runnable `torch.fx.GraphModule`.

`torch.export.load` imports torch's compiler stack (dynamo, over a second) and rebuilds every value's metadata
as a symbolic fake tensor (milliseconds a node): most of `skewgate parity`'s fixed cost. Parity needs less: the
ATen graph with its node names, op targets, arguments, shapes and module paths, and the weights, to run it
eagerly — the same ATen ops that `ExportedProgram.module()` runs. This module builds exactly that and nothing
more. Whatever it does not know (higher-order ops, custom objects, buffer mutations, an argument kind it has not
met, more than one model) raises `Unsupported`, and `pt2.load_program` falls back to `torch.export.load`.
Archives are checked for pickled entries before either reader sees them (`pt2.pickled_entries`).
"""

from __future__ import annotations

import json
import keyword
import operator
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# torch/_export/serde/schema.py `ScalarType` → torch dtype name
_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
           12: "bool", 13: "bfloat16"}
_MEMORY_FORMATS = {1: "contiguous_format", 2: "channels_last", 3: "channels_last_3d", 4: "preserve_format"}
_SCALARS = {"as_int", "as_bool", "as_string", "as_ints", "as_bools", "as_strings"}


class Unsupported(Exception):
    """The archive uses something this reader does not rebuild; use `torch.export.load` instead."""


@dataclass(frozen=True)
class ValueMeta:
    """What parity reads of a value (`node.meta["val"]`): its shape, symbolic sizes as None, and dtype."""

    shape: tuple[int | None, ...]
    dtype: str


@dataclass(frozen=True)
class GraphSignature:
    user_inputs: tuple[str, ...]
    user_outputs: tuple[str, ...]


class Pt2Graph:
    """The subset of `ExportedProgram` parity uses: `graph` (weights as placeholders, like the program's),
    `graph_signature` (user inputs and outputs) and `module()` (user inputs in, flat outputs out)."""

    def __init__(self, graph: torch.fx.Graph, weights: dict[str, torch.Tensor], signature: GraphSignature) -> None:
        self.graph = graph
        self.graph_signature = signature
        self._weights = weights  # placeholder name → tensor

    def module(self) -> torch.fx.GraphModule:
        """A fresh module each call (callers rewrite its graph): weights become attributes of the root."""
        import torch

        root = torch.nn.Module()
        graph = torch.fx.Graph()
        remap: dict[torch.fx.Node, torch.fx.Node] = {}
        for index, node in enumerate(self.graph.nodes):
            if node.op == "placeholder" and node.name in self._weights:
                attribute = f"w{index}"
                weight = self._weights[node.name]
                if isinstance(weight, torch.nn.Parameter):
                    root.register_parameter(attribute, weight)
                else:
                    root.register_buffer(attribute, weight)
                remap[node] = graph.get_attr(attribute)
            elif node.op == "output":
                graph.output(torch.fx.map_arg(node.args[0], lambda n: remap[n]))
            else:
                remap[node] = graph.node_copy(node, lambda n: remap[n])
        return torch.fx.GraphModule(root, graph)


def load_pt2_graph(path: str | Path) -> Pt2Graph:
    """The archive's one program as a `Pt2Graph`; `Unsupported` for anything this reader does not rebuild."""
    try:
        return _load(path)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:  # a layout this reader has not met
        raise Unsupported(f"{type(err).__name__}: {err}") from err


def _load(path: str | Path) -> Pt2Graph:
    import torch

    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        models = [n for n in names if n.split("/")[-2:-1] == ["models"] and n.endswith(".json")]
        if len(models) != 1:
            raise Unsupported(f"{len(models)} models in the archive")
        root, stem = models[0][: models[0].rfind("models/")], Path(models[0]).stem
        program = json.loads(archive.read(models[0]))
        tensors = _payloads(archive, f"{root}data/weights/", f"{stem}_weights_config.json", names)
        tensors |= _payloads(archive, f"{root}data/constants/", f"{stem}_constants_config.json", names)
    module = program["graph_module"]
    weights, user_inputs = _inputs(module["signature"]["input_specs"], tensors)
    user_outputs = []
    for spec in module["signature"]["output_specs"]:
        if set(spec) != {"user_output"} or "as_tensor" not in spec["user_output"]["arg"]:
            raise Unsupported(f"output spec {sorted(spec)}")
        user_outputs.append(spec["user_output"]["arg"]["as_tensor"]["name"])
    graph = _Builder(module["graph"], torch).build()
    return Pt2Graph(graph, weights, GraphSignature(tuple(user_inputs), tuple(user_outputs)))


def _payloads(archive: zipfile.ZipFile, folder: str, config_name: str, names: list[str]) -> dict[str, Any]:
    """Fully qualified name → tensor, each viewed with its own sizes and strides over its file's bytes."""
    import torch

    if folder + config_name not in names:
        return {}
    config = json.loads(archive.read(folder + config_name)).get("config", {})
    flat: dict[str, torch.Tensor] = {}
    out = {}
    for fqn, meta in config.items():
        if meta.get("use_pickle") or "tensor_meta" not in meta:
            raise Unsupported(f"payload {fqn} is not a plain tensor")
        tmeta = meta["tensor_meta"]
        dtype = getattr(torch, _DTYPES.get(tmeta["dtype"], "unknown"), None)
        if dtype is None or tmeta["device"]["type"] != "cpu":
            raise Unsupported(f"payload {fqn}: dtype {tmeta['dtype']} on {tmeta['device']['type']}")
        sizes, strides = _ints(tmeta["sizes"]), _ints(tmeta["strides"])
        if meta["path_name"] not in flat:
            data = bytearray(archive.read(folder + meta["path_name"]))
            flat[meta["path_name"]] = (torch.frombuffer(data, dtype=dtype) if data
                                       else torch.zeros(sizes, dtype=dtype).flatten())
            # As torch does: ATen picks kernels by `requires_grad` even under no_grad (matmul folding), so a
            # flag left off changes results in the last bits.
            flat[meta["path_name"]].requires_grad_(bool(tmeta.get("requires_grad")))
        tensor = torch.as_strided(flat[meta["path_name"]], sizes, strides, tmeta["storage_offset"].get("as_int", 0))
        out[fqn] = (torch.nn.Parameter(tensor, requires_grad=bool(tmeta.get("requires_grad")))
                    if meta.get("is_param") else tensor)
    return out


def _ints(values: list[dict[str, Any]]) -> list[int]:
    if any("as_int" not in v for v in values):
        raise Unsupported("a weight with a symbolic size")
    return [int(v["as_int"]) for v in values]


def _inputs(specs: list[dict[str, Any]], tensors: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    weights, user_inputs = {}, []
    for spec in specs:
        (kind, body), = spec.items()
        if kind == "user_input" and "as_tensor" in body["arg"]:
            user_inputs.append(body["arg"]["as_tensor"]["name"])
        elif kind in ("parameter", "buffer", "tensor_constant"):
            fqn = body.get("parameter_name") or body.get("buffer_name") or body.get("tensor_constant_name")
            if fqn not in tensors:
                raise Unsupported(f"{kind} {fqn} has no payload")
            weights[body["arg"]["name"]] = tensors[fqn]
        else:
            raise Unsupported(f"input spec {kind}")
    return weights, user_inputs


class _Builder:
    """Serialized graph → `torch.fx.Graph`, node for node, with the names, arguments and metadata torch gives."""

    def __init__(self, serialized: dict[str, Any], torch: Any) -> None:
        self.torch = torch
        self.serialized = serialized
        self.graph = torch.fx.Graph()
        self.nodes: dict[str, torch.fx.Node] = {}

    def build(self) -> torch.fx.Graph:
        for value in self.serialized["inputs"]:
            if "as_tensor" not in value:
                raise Unsupported(f"graph input {sorted(value)}")
            name = value["as_tensor"]["name"]
            self.nodes[name] = node = self.graph.placeholder(name)
            # FX renames a placeholder that shadows a builtin (`input` → `input_1`, nn.Sequential's argument);
            # the signature and the ONNX graph use the name as saved, as `torch.export.load` keeps it
            node.name = name
            node.meta["val"] = self._meta(name)
        for serialized in self.serialized["nodes"]:
            self._node(serialized)
        outputs = [self._argument(value) for value in self.serialized["outputs"]]
        self.graph.output(tuple(outputs))
        return self.graph

    def _node(self, serialized: dict[str, Any]) -> None:
        target = self._target(serialized["target"])
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for item in serialized["inputs"]:
            value = self._argument(item["arg"])
            if item.get("kind") == 2 and not keyword.iskeyword(item["name"]):
                kwargs[item["name"]] = value
            elif item.get("kind") in (1, 2) or (item.get("kind") is None and not kwargs):
                args.append(value)
            else:
                raise Unsupported(f"argument kind {item.get('kind')} of {serialized['name']}")
        node = self.graph.create_node("call_function", target, tuple(args), kwargs, name=serialized["name"])
        meta = self._metadata(serialized.get("metadata") or {})
        node.meta.update(meta)
        outputs = serialized["outputs"]
        if len(outputs) == 1 and "as_tensor" in outputs[0] and outputs[0]["as_tensor"]["name"] == node.name:
            node.meta["val"] = self._meta(node.name)
            self.nodes[node.name] = node
        elif len(outputs) == 1 and "as_sym_int" in outputs[0]:
            node.meta["val"] = None  # a size computed at run time
            self.nodes[outputs[0]["as_sym_int"]["as_name"]] = node
        else:
            flat = outputs[0]["as_tensors"] if len(outputs) == 1 and "as_tensors" in outputs[0] else outputs
            values = []
            for index, output in enumerate(flat):
                name = output.get("name") or output.get("as_tensor", {}).get("name")
                if name is None:
                    raise Unsupported(f"output {sorted(output)} of {node.name}")
                item = self.graph.create_node("call_function", operator.getitem, (node, index), name=name)
                item.meta.update(meta)
                item.meta["val"] = self._meta(name)
                self.nodes[name] = item
                values.append(item.meta["val"])
            node.meta["val"] = tuple(values)

    def _target(self, text: str) -> Any:
        if text.startswith("torch.ops."):
            target: Any = self.torch.ops
            for part in text.split(".")[2:]:
                target = getattr(target, part, None)
                if target is None:
                    raise Unsupported(f"op {text}")
            if not isinstance(target, self.torch._ops.OpOverload):
                raise Unsupported(f"op {text} is not an ATen overload")
            return target
        if text.startswith("_operator.") and hasattr(operator, text.split(".", 1)[1]):
            return getattr(operator, text.split(".", 1)[1])
        raise Unsupported(f"target {text}")

    def _argument(self, value: dict[str, Any]) -> Any:
        (kind, body), = value.items()
        if kind == "as_none":
            return None
        if kind == "as_tensor":
            return self.nodes[body["name"]]
        if kind == "as_tensors":
            return [self.nodes[item["name"]] for item in body]
        if kind == "as_optional_tensors":
            return [None if "as_none" in item else self.nodes[item["as_tensor"]["name"]] for item in body]
        if kind in ("as_float", "as_floats"):  # non-finite floats are stored as "Infinity", "-Infinity", "NaN"
            return [float(item) for item in body] if isinstance(body, list) else float(body)
        if kind in _SCALARS:
            return list(body) if isinstance(body, list) else body
        if kind in ("as_sym_int", "as_sym_bool", "as_sym_float"):
            return self._symbolic(body)
        if kind in ("as_sym_ints", "as_sym_bools", "as_sym_floats"):
            return [self._symbolic(item) for item in body]
        if kind == "as_scalar_type" and body in _DTYPES:
            return getattr(self.torch, _DTYPES[body])
        if kind == "as_memory_format" and body in _MEMORY_FORMATS:
            return getattr(self.torch, _MEMORY_FORMATS[body])
        if kind == "as_device":
            return self.torch.device(body["type"], body.get("index"))
        if kind == "as_layout" and body == 7:
            return self.torch.strided
        raise Unsupported(f"argument {kind}")

    def _symbolic(self, body: dict[str, Any]) -> Any:
        (kind, value), = body.items()
        if kind == "as_float":
            return float(value)
        return self.nodes[value] if kind == "as_name" else value

    def _meta(self, name: str) -> ValueMeta:
        found = self.serialized["tensor_values"].get(name)
        if found is None:
            raise Unsupported(f"no tensor metadata for {name}")
        shape = tuple(int(s["as_int"]) if "as_int" in s else None for s in found["sizes"])
        return ValueMeta(shape, _DTYPES.get(found["dtype"], str(found["dtype"])))

    @staticmethod
    def _metadata(metadata: dict[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if metadata.get("stack_trace"):
            out["stack_trace"] = metadata["stack_trace"]
        if metadata.get("nn_module_stack"):
            # "key,path,type;key,path,type" (torch's format; a type may hold commas inside brackets)
            stack = {}
            for item in metadata["nn_module_stack"].split(";"):
                key, path, kind = _split3(item)
                stack[key] = (path, kind)
            out["nn_module_stack"] = stack
        return out


def _split3(text: str) -> tuple[str, str, str]:
    parts, start, depth = [], 0, 0
    for index, char in enumerate(text):
        depth += (char in "[(" and 1) or (-1 if char in ")]" else 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    if len(parts) != 3:
        raise Unsupported(f"nn_module_stack entry {text!r}")
    return parts[0], parts[1], parts[2]
