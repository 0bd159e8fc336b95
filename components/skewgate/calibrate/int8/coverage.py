"""What the INT8 file really quantises: per op type, how many nodes run in INT8 and in FP32, and the share of the
multiply-accumulates (MACs, per sample) that run in INT8. ORT's static QDQ quantiser leaves some ops in FP32
whatever the ranges (LSTM, GRU, RNN have no QDQ form), and the budget loop keeps others there; a model whose
MACs mostly stay FP32 is an FP32 model with a few Q/DQ pairs, and the verdict says so."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from skewgate.calibrate.int8.quantize import op_types_to_quantize
from skewgate.common.layers import with_intermediates
from skewgate.common.runtime import run_by_name, session

if TYPE_CHECKING:
    import onnx

MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN")
Q_DQ = ("QuantizeLinear", "DequantizeLinear")
# ops that only move or select values: INT8 or not, they do no arithmetic worth a line in the verdict
MOVES = ("Reshape", "Transpose", "Slice", "Concat", "Squeeze", "Unsqueeze", "Flatten", "Gather", "GatherElements",
         "Split", "Pad", "MaxPool", "TopK", "ArgMax", "Where", "Resize")


def macs_per_node(model: onnx.ModelProto, sample: Mapping[str, np.ndarray]) -> dict[str, tuple[str, int]]:
    """Node name → (op type, MACs for one sample), from the shapes one FP32 run over `sample` (one row of each
    input) produces: shape inference cannot follow the dynamo exporter's computed reshapes everywhere."""
    from onnx import numpy_helper

    nodes = [n for n in model.graph.node if n.op_type in MAC_OPS]
    shapes: dict[str, tuple[int, ...]] = {i.name: tuple(numpy_helper.to_array(i).shape)
                                          for i in model.graph.initializer}
    wanted = [v for n in nodes for v in (*n.input, *n.output) if v and v not in shapes and v not in sample]
    run = session(with_intermediates(model, sorted(set(wanted))), arena=False)
    shapes.update({k: v.shape for k, v in {**sample, **run_by_name(run, dict(sample))}.items()})
    found = {}
    for node in nodes:
        try:
            found[node.name] = (node.op_type, _macs(node, shapes))
        except (KeyError, IndexError):  # a shape ORT did not hand back: the node counts as 0, the rest still add up
            found[node.name] = (node.op_type, 0)
    return found


def _macs(node: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]]) -> int:
    inputs = [shapes[i] if i else () for i in node.input]
    if node.op_type in ("LSTM", "GRU", "RNN"):  # X [T, B, I] or [B, T, I]; W [D, gates·H, I]; R [D, gates·H, H]
        x, w, r = inputs[:3]
        return x[0] * x[1] * w[0] * w[1] * (w[2] + r[2])
    out = shapes[node.output[0]]
    if node.op_type == "Conv":
        return math.prod(out) * math.prod(inputs[1][1:])
    if node.op_type == "ConvTranspose":
        return math.prod(inputs[0]) * math.prod(inputs[1][1:])
    if node.op_type == "Gemm":
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        return math.prod(out) * inputs[0][0 if trans_a else 1]
    return math.prod(out) * inputs[0][-1]  # MatMul


def coverage(int8: onnx.ModelProto, macs: Mapping[str, tuple[str, int]]) -> dict[str, Any]:
    """INT8 vs FP32 in the written model. A node runs in INT8 when its data inputs come from DequantizeLinear
    (the pattern ORT fuses into a QLinear kernel); a MAC op needs both operands so, others their first input."""
    dequantized = {o for n in int8.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    compute = set(op_types_to_quantize()) | set(MAC_OPS)
    ops: dict[str, Counter[str]] = {}
    fp32_nodes, int8_macs, fp32_macs = [], 0, Counter[str]()
    for node in int8.graph.node:
        if node.op_type in Q_DQ or node.op_type not in compute:
            continue
        operands = [i for i in node.input[: 2 if node.op_type in MAC_OPS else 1] if i]
        quantized = bool(operands) and all(i in dequantized for i in operands)
        ops.setdefault(node.op_type, Counter())["int8" if quantized else "fp32"] += 1
        count = macs.get(node.name, (node.op_type, 0))[1]
        if quantized:
            int8_macs += count
        elif node.op_type not in MOVES:
            fp32_nodes.append(node.name)
            if node.op_type in MAC_OPS:
                fp32_macs[node.op_type] += count
    total = int8_macs + sum(fp32_macs.values())
    return {"mac_share": int8_macs / total if total else 0.0, "macs_per_sample": total, "int8_macs": int8_macs,
            "fp32_macs_by_op": {op: n / total if total else 0.0 for op, n in fp32_macs.most_common()},
            "op_types": {op: dict(c) for op, c in sorted(ops.items())}, "fp32_nodes": fp32_nodes}


def describe(found: Mapping[str, Any]) -> str:
    """One line: the INT8 share, the op types whose MACs stayed FP32, and the other op types left in FP32."""
    stayed = [f"{op} {share:.1%} of MACs ({found['op_types'][op]['fp32']} node(s))"
              for op, share in found["fp32_macs_by_op"].items() if found["op_types"].get(op, {}).get("fp32")]
    others = [f"{op} ×{c['fp32']}" for op, c in found["op_types"].items()
              if c.get("fp32") and op not in MAC_OPS and op not in MOVES]
    text = f"INT8 runs {found['mac_share']:.1%} of {found['macs_per_sample']:,} MACs per sample"
    if stayed:
        text += "; FP32: " + ", ".join(stayed)
    if others:
        text += "; other ops left in FP32: " + ", ".join(others)
    return text
