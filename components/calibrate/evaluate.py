"""FP32 vs INT8 on the eval set: accuracy, top-1 agreement and logit statistics (as parity-diff reports them),
per-layer SQNR across the Q/DQ nodes, how far each eval activation falls outside the calibrated range, and the
layers ranked by the error they introduce."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from skewgate.calibrate.collect import batches
from skewgate.calibrate.quantize import WEIGHTED_OPS
from skewgate.common.compare import Tolerance
from skewgate.common.runtime import run_by_name, session
from skewgate.parity.core import quantized_counterparts
from skewgate.parity.errors import RunningError, logit_agreement
from skewgate.parity.layers import onnx_values, with_intermediates

if TYPE_CHECKING:
    import onnx


@dataclass
class Evaluation:
    drop: float  # accuracy drop with labels, else top-1 disagreement
    accuracy_fp32: float | None
    accuracy_int8: float | None
    logits: dict[str, float]
    layers: list[dict[str, Any]] = field(default_factory=list)  # value, node, op, sqnr_db, introduced_db
    uncovered: dict[str, float] = field(default_factory=dict)  # tensor → fraction of eval values out of range


def evaluate(fp32: onnx.ModelProto, int8: onnx.ModelProto, data: Mapping[str, np.ndarray],
             labels: np.ndarray | None, *, batch_size: int, ranges: Mapping[str, tuple[float, float]] | None = None,
             layerwise: bool = False) -> Evaluation:
    """Outputs always; with `layerwise`, per-layer SQNR and (given `ranges`) coverage of the calibrated ranges."""
    output = fp32.graph.output[0].name
    values = onnx_values(fp32)
    pairs: dict[str, str] = {}  # INT8 value → FP32 value
    if layerwise:
        # node outputs, and the graph inputs too: their own quantisation error
        pairs = quantized_counterparts([*data, *values], onnx_values(int8))
    fp32_names = sorted({*pairs.values(), *(ranges or {})} - set(data)) if layerwise else []
    fp32_session = session(with_intermediates(fp32, fp32_names) if layerwise else fp32, arena=not layerwise)
    int8_session = session(with_intermediates(int8, [p for p in pairs if p not in data]) if layerwise else int8,
                           arena=not layerwise)
    errors: dict[str, RunningError] = {}
    outside: dict[str, list[int]] = {}  # tensor → [out of range, total]
    rng = np.random.default_rng(0)
    reference, candidate = [], []
    for _start, feeds in batches(data, batch_size, stage="evaluation FP32 vs INT8"):
        a, b = {**feeds, **run_by_name(fp32_session, feeds)}, {**feeds, **run_by_name(int8_session, feeds)}
        reference.append(a[output])
        candidate.append(b[output])
        for int8_name, name in pairs.items():
            if int8_name in b and name in a:
                errors.setdefault(name, RunningError(Tolerance(0.0, 0.0))).update(b[int8_name], a[name], rng)
        for name, (low, high) in (ranges or {}).items() if layerwise else ():
            if name in a:
                counts = outside.setdefault(name, [0, 0])
                counts[0] += int(((a[name] < low) | (a[name] > high)).sum())
                counts[1] += a[name].size
        del a, b
    ref, cand = np.concatenate(reference), np.concatenate(candidate)
    logits = logit_agreement(ref, cand) if ref.ndim >= 2 and ref.shape[-1] > 1 else {}
    acc_fp32 = acc_int8 = None
    if labels is not None:
        acc_fp32 = float(np.mean(ref.argmax(-1) == labels))
        acc_int8 = float(np.mean(cand.argmax(-1) == labels))
        drop = acc_fp32 - acc_int8
    else:
        drop = 1.0 - logits.get("top1_agreement", 1.0)
    return Evaluation(drop, acc_fp32, acc_int8, logits, _layer_rows(values, errors, data),
                      {k: v[0] / max(v[1], 1) for k, v in outside.items()})


def _layer_rows(values: Mapping[str, Any], errors: Mapping[str, RunningError],
                inputs: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """One row per compared value in topological order. `introduced_db` is how much SQNR was lost since the
    nearest compared values upstream (negative: error was added); `nodes` are the nodes in between that added it
    (the quantiser fuses some ops, e.g. Conv + Relu, so one compared value can stand for several nodes)."""
    sqnr = {name: err.sqnr_db for name, err in errors.items()}
    rows = []
    for name in [n for n in inputs if n in errors] + sorted((n for n in errors if n in values),
                                                            key=lambda n: values[n].depth):
        value = values.get(name)
        upstream, nodes = _upstream(name, values, sqnr)
        introduced = sqnr[name] - min(upstream) if upstream else 0.0
        rows.append({"value": name, "node": value.node if value else "<input>",
                     "op": value.op_type if value else "input", "module": value.module if value else "<input>",
                     "sqnr_db": None if math.isinf(sqnr[name]) else sqnr[name],
                     "introduced_db": None if math.isinf(introduced) or math.isnan(introduced) else introduced,
                     "nodes": nodes})
    return rows


def _upstream(name: str, values: Mapping[str, Any], sqnr: Mapping[str, float]) -> tuple[list[float], list[str]]:
    """SQNRs of the nearest compared ancestors of `name`, and the nodes from them to `name`."""
    if name not in values:
        return [], []
    found, nodes, seen = [], [values[name].node], {name}
    stack = list(values[name].inputs)
    while stack:
        current = stack.pop()
        if not current or current in seen:
            continue
        seen.add(current)
        if current in sqnr:
            found.append(sqnr[current])
        elif current in values:
            nodes.append(values[current].node)
            stack.extend(values[current].inputs)
    return found, nodes


def sensitivity(rows: list[dict[str, Any]], quantized: Mapping[str, str]) -> list[str]:
    """Node names to keep in FP32, most error introduced first; of one row's nodes, the weighted ops.
    `quantized`: node name → op type, for the nodes the quantiser handles."""
    ordered: dict[str, None] = {}
    for row in sorted(rows, key=lambda r: r["introduced_db"] if r["introduced_db"] is not None else 0.0):
        if (row["introduced_db"] or 0.0) >= 0:
            break
        weighted = [n for n in row["nodes"] if quantized.get(n) in WEIGHTED_OPS]
        for node in weighted or [row["node"]]:  # a Relu kept in FP32 beside a quantised Conv changes nothing
            if node in quantized:
                ordered.setdefault(node, None)
    return list(ordered)
