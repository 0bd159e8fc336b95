"""What the budget loop may keep in FP32, in the order the evidence points at.

Two sources of evidence. The layerwise view ranks the nodes by the SQNR each one loses (unfused, see
`evaluate`). The deployed graph fuses Softmax and activation×activation MatMuls (attention scores and context)
into QLinear kernels whose error the layerwise view cannot see: when the deployed drop exceeds the unfused
graph's, the integer kernels themselves add error, so 7-bit weights are tried first (on x86 CPUs without VNNI,
ORT's u8×s8 kernels add pairs of products in int16, which full-range weights can saturate; ORT's `reduce_range`
exists for this), then those fused suspects, then the ranked nodes; else the ranked nodes come first. The last
MatMul/Gemm before each output (the head, whose rounding moves the logits directly) comes last. Each candidate
is a group of nodes kept in FP32 together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skewgate.calibrate.int8.evaluate import sensitivity

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class Candidate:  # hashable: the budget loop keys its probes by candidate
    label: str
    nodes: tuple[str, ...]
    why: str
    reduce_range: bool = False  # 7-bit weights for every quantised op from this trial on


def candidates(model: onnx.ModelProto, rows: list[dict[str, Any]], quantizable: Mapping[str, str], *,
               fused_gap: float) -> list[Candidate]:
    """`quantizable`: node name → op type of the nodes the quantiser handles; `fused_gap`: deployed drop minus
    the unfused graph's."""
    constants = {i.name for i in model.graph.initializer} | {o for n in model.graph.node if n.op_type == "Constant"
                                                             for o in n.output}
    fused = []
    softmax = tuple(n for n, op in quantizable.items() if op == "Softmax")
    if softmax:
        fused.append(Candidate("Softmax", softmax, "fused into QLinearSoftmax when deployed"))
    attention = tuple(n.name for n in model.graph.node if n.op_type == "MatMul" and n.name in quantizable
                      and len(n.input) >= 2 and not {n.input[0], n.input[1]} & constants)
    if attention:
        fused.append(Candidate("attention MatMuls", attention,
                               "activation × activation, fused into QLinearMatMul when deployed"))
    db = {row["node"]: row["introduced_db"] for row in rows}
    ranked = [Candidate(node, (node,), f"loses {-db[node]:.1f} dB in the layerwise view" if db.get(node) is not None
                        else "adds error in the layerwise view")
              for node in sensitivity(rows, quantizable)]
    heads = tuple(dict.fromkeys(h for h in (_head(model, o.name) for o in model.graph.output)
                                if h and h in quantizable))
    seven_bit = Candidate("7-bit weights", (), f"the deployed drop exceeds the unfused graph's by {fused_gap:.4f}: "
                          "integer kernels saturating", reduce_range=True)
    ordered = [seven_bit, *fused, *ranked] if fused_gap > 0 else [*ranked, *fused]
    if heads:
        ordered.append(Candidate("output head", heads, "last MatMul/Gemm before an output"))
    seen: set[str] = set()
    unique = []
    for candidate in ordered:  # a node already in an earlier candidate adds nothing a second time
        fresh = tuple(n for n in candidate.nodes if n not in seen)
        if fresh or candidate.reduce_range:
            unique.append(Candidate(candidate.label, fresh, candidate.why, candidate.reduce_range))
            seen.update(fresh)
    return unique


def _head(model: onnx.ModelProto, output: str) -> str | None:
    """The nearest MatMul/Gemm upstream of `output` (breadth-first over producers)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    # visited by the value a node produces: ORT's prepared models leave many nodes unnamed, and one unnamed node
    # seen must not hide the others
    frontier, seen = [output], set()
    while frontier:
        following: list[str] = []
        for value in frontier:
            node = producers.get(value)
            if node is None or node.output[0] in seen:
                continue
            seen.add(node.output[0])
            if node.op_type in ("MatMul", "Gemm"):
                return node.name
            following.extend(i for i in node.input if i)
        frontier = following
    return None
