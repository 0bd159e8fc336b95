"""FP32 vs INT8 on the eval set, in two views that never mix.

The verdict's view (`reference`, `judge`): final outputs of model *files*, each in a default ONNX Runtime session
(full graph optimisation, nothing exposed) — the graph that ships, where ORT fuses Q/DQ pairs into QLinearConv,
QGemm, QLinearMatMul, QLinearSoftmax and friends. Accuracy, top-1 agreement and KL come from here only.

The diagnostic view (`layerwise`): the same models with intermediates exposed as outputs, which stops those
fusions — so its numbers are not the deployed model's. It gives per-layer SQNR across the Q/DQ nodes, how far each
eval activation falls outside the calibrated range, and the output drop of that unfused graph (set beside the
deployed one, the gap is the share of the damage that the fused kernels add)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skewgate.calibrate.int8.collect import batches
from skewgate.calibrate.int8.quantize import WEIGHTED_OPS
from skewgate.common.compare import Tolerance
from skewgate.common.error_stats import RunningError
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.layers import onnx_values, quantized_counterparts, with_intermediates
from skewgate.common.output_tasks import CLASS_TASKS, Agreement, TaskSpec, agreements, resolve_outputs
from skewgate.common.runtime import run_by_name, session

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class Reference:
    """FP32 outputs over the eval set, computed once per run: every trial is judged against these, each output
    as its task says (common/output_tasks.py: the same judgement as `parity --int8`)."""

    names: list[str]
    outputs: list[np.ndarray]
    probabilities: frozenset[str]  # outputs a Softmax produces: compared as probabilities, not logits
    labels: np.ndarray | None
    labelled: str | None  # the output the labels score: the first output with classes
    specs: dict[str, TaskSpec]  # per output: its task and class axis
    min_cosine: float = 0.99  # embedding: a sample below this similarity is harmed
    max_error: float = 0.05  # regression: a value moved by more than this share of its column's spread is harmed

    @cached_property
    def accuracy(self) -> float | None:
        if self.labels is None or self.labelled is None:
            return None
        return _accuracy(self.outputs[self.names.index(self.labelled)], self.specs[self.labelled], self.labels)


@dataclass
class Evaluation:
    drop: float  # accuracy drop with labels, else the worst output's share of harmed positions (1 − agreement)
    accuracy_fp32: float | None
    accuracy_int8: float | None
    logits: dict[str, float | None]  # the first output with classes: its agreement figures (top1_agreement, KL, …)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # per output: task, agreement figures, SQNR
    sha256: str = ""  # of the judged file
    worst: Agreement | None = None  # the output with the lowest agreement: what `agreement` is

    @property
    def agreement(self) -> float:
        return self.worst.agreement if self.worst is not None else 0.0


@dataclass
class Layerwise:
    """The diagnostic view (see the module docstring)."""

    layers: list[dict[str, Any]]  # value, node, op, module, sqnr_db, introduced_db, nodes
    uncovered: dict[str, float]  # tensor → fraction of eval values outside its calibrated range
    drop: float  # the output drop of the exposed, unfused INT8 graph (not the deployed model's)


def deployed_session(path: str | Path) -> Any:
    """The session a server would build from the file: default options (ORT_ENABLE_ALL), CPU."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def cpu_flags() -> list[str]:
    """The CPU's feature flags as Linux lists them (x86's `flags` line); empty where that is unknown (no
    /proc/cpuinfo, or an architecture that lists its features otherwise)."""
    try:
        return next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags")), [])
    except OSError:
        return []


def platform() -> dict[str, Any]:
    """Where the deployed figures were measured: ORT's integer kernels differ by CPU (without VNNI, u8×s8 pairs
    are summed in int16 and can saturate), so an INT8 verdict holds for this kind of machine."""
    import onnxruntime as ort

    flags = cpu_flags()
    return {"onnxruntime": ort.__version__, "provider": "CPUExecutionProvider",
            "vnni": any(f in ("avx512_vnni", "avx_vnni", "amx_int8") for f in flags) if flags else None}


def deployed_outputs(path: str | Path, data: Mapping[str, np.ndarray], *, batch_size: int,
                     stage: str) -> tuple[list[str], list[np.ndarray]]:
    """Every graph output of the model file over `data`, in batches."""
    run = deployed_session(path)
    names = [o.name for o in run.get_outputs()]
    parts: list[list[np.ndarray]] = [[] for _ in names]
    for _start, feeds in batches(data, batch_size, stage=stage):
        for part, value in zip(parts, run.run(None, feeds), strict=True):
            part.append(value)
    return names, [np.concatenate(p) for p in parts]


def reference(fp32_path: str | Path, fp32: onnx.ModelProto, data: Mapping[str, np.ndarray],
              labels: np.ndarray | None, *, batch_size: int, source: str | Path, task: str = "auto",
              class_axis: int | None = None, output_tasks: Mapping[str, str] | None = None,
              min_cosine: float = 0.99, max_error: float = 0.05) -> Reference:
    """The FP32 model's outputs as deployed, each with its task. `source` names the labels' file in errors."""
    names, outputs = deployed_outputs(fp32_path, data, batch_size=batch_size, stage="FP32 reference outputs")
    producers = {o: n.op_type for n in fp32.graph.node for o in n.output}
    specs = resolve_outputs(dict(zip(names, outputs, strict=True)), task=task, class_axis=class_axis,
                            output_tasks=output_tasks, labels=labels)
    labelled = next((n for n in names if specs[n].task in CLASS_TASKS), None) if labels is not None else None
    if labels is not None:
        output = outputs[names.index(labelled)] if labelled is not None else None
        axis = specs[labelled].class_axis if labelled is not None else None
        if output is None or tuple(s for i, s in enumerate(output.shape) if i != axis) != labels.shape:
            raise InputError(source, field="labels", expected="a model output with classes whose shape, less its "
                             "class axis, is the labels' (N for a classifier, N×H×W for segmentation)",
                             found=f"labels {list(labels.shape)}; outputs " + ", ".join(
                                 f"{n} {list(o.shape)} ({specs[n].task})" for n, o in zip(names, outputs, strict=True)))
    return Reference(names, outputs, frozenset(n for n in names if producers.get(n) == "Softmax"), labels,
                     labelled, specs, min_cosine, max_error)


def judge(ref: Reference, int8_path: str | Path, data: Mapping[str, np.ndarray], *, batch_size: int) -> Evaluation:
    """The verdict's figures for the INT8 model file `int8_path`, as deployed."""
    names, outputs = deployed_outputs(int8_path, data, batch_size=batch_size, stage="INT8 as deployed")
    if names != ref.names:
        raise RuntimeError(f"{int8_path}: outputs {names} differ from the FP32 model's {ref.names}")
    return compare(ref, dict(zip(names, outputs, strict=True)), sha256=sha256_file(int8_path))


def compare(ref: Reference, candidate: Mapping[str, np.ndarray], *, sha256: str = "") -> Evaluation:
    per_output: dict[str, dict[str, Any]] = {}
    judged = agreements(dict(zip(ref.names, ref.outputs, strict=True)), candidate, ref.specs,
                        probabilities=ref.probabilities, min_cosine=ref.min_cosine, max_error=ref.max_error)
    for name, expected in zip(ref.names, ref.outputs, strict=True):
        actual = candidate[name]
        per_output[name] = {"task": ref.specs[name].task, "sqnr_db": _sqnr_db(actual, expected),
                            **judged[name].figures}
    worst = min(judged.values(), key=lambda a: a.agreement, default=None)
    with_classes = [n for n in ref.names if ref.specs[n].task in CLASS_TASKS]
    logits = judged[with_classes[0]].figures if with_classes else {}
    acc_fp32 = ref.accuracy
    acc_int8 = None
    if acc_fp32 is not None and ref.labelled is not None and ref.labels is not None:
        acc_int8 = _accuracy(candidate[ref.labelled], ref.specs[ref.labelled], ref.labels)
        drop = acc_fp32 - acc_int8
    else:
        drop = 1.0 - worst.agreement if worst is not None else 1.0
    return Evaluation(drop, acc_fp32, acc_int8, logits, per_output, sha256, worst)


def _accuracy(output: np.ndarray, spec: TaskSpec, labels: np.ndarray) -> float:
    """Share of labels (per sample, or per pixel) the output's argmax over its class axis hits."""
    return float(np.mean(output.argmax(spec.class_axis) == labels))


def _sqnr_db(actual: np.ndarray, expected: np.ndarray) -> float | None:
    noise = float(np.sum((actual.astype(np.float64) - expected) ** 2))
    if noise == 0:
        return None  # identical
    return 10 * math.log10(max(float(np.sum(expected.astype(np.float64) ** 2)), 1e-300) / noise)


KEEP_BYTES = 64 * 2**20  # FP32 intermediates kept for the second layerwise view; beyond this they are recomputed


class Fp32Side:
    """The layerwise view's FP32 side, one per run: the FP32 model with intermediates exposed, its session built
    once, and its values over the eval set kept (up to `keep_bytes`, so memory stays bounded) — the view of the
    final INT8 model then compares against them instead of running FP32 over the eval set again."""

    def __init__(self, model: onnx.ModelProto, data: Mapping[str, np.ndarray], *, batch_size: int,
                 keep_bytes: int = KEEP_BYTES) -> None:
        self.model, self.data, self.batch_size, self.keep_bytes = model, data, batch_size, keep_bytes
        self.values = onnx_values(model)
        self.runs = 0  # passes of the FP32 model over the eval set (what the kept values save)
        self._exposed: frozenset[str] = frozenset()
        self._session: Any = None
        self._kept: list[dict[str, np.ndarray]] | None = None

    def batches(self, names: Collection[str], *, stage: str) -> Iterator[tuple[dict[str, np.ndarray],
                                                                              dict[str, np.ndarray]]]:
        """Per eval batch: its feeds, and the FP32 graph outputs and values `names` (at least) with the feeds."""
        wanted = frozenset(names) - set(self.data)
        if self._kept is not None and wanted <= self._exposed:
            for (_start, feeds), values in zip(batches(self.data, self.batch_size, stage=stage), self._kept,
                                               strict=True):
                yield feeds, {**feeds, **values}
            return
        if self._session is None or not wanted <= self._exposed:
            self._session = session(with_intermediates(self.model, sorted(wanted)), arena=False)
            self._exposed, self._kept = wanted, None
        kept: list[dict[str, np.ndarray]] | None = []
        size = 0
        self.runs += 1
        for _start, feeds in batches(self.data, self.batch_size, stage=stage):
            values = run_by_name(self._session, feeds)
            if kept is not None:
                size += sum(v.nbytes for v in values.values())
                kept = [*kept, values] if size <= self.keep_bytes else None
            yield feeds, {**feeds, **values}
        self._kept = kept


def layerwise(fp32: Fp32Side, int8: onnx.ModelProto, ref: Reference, *,
              ranges: Mapping[str, tuple[float, float]] | None = None) -> Layerwise:
    """Per-layer SQNR and (given `ranges`) coverage of the calibrated ranges, with intermediates exposed."""
    data = fp32.data
    # node outputs, and the graph inputs too: their own quantisation error
    pairs = quantized_counterparts([*data, *fp32.values], onnx_values(int8))  # INT8 value → FP32 value
    int8_session = session(with_intermediates(int8, [p for p in pairs if p not in data]), arena=False)
    errors: dict[str, RunningError] = {}
    outside: dict[str, list[int]] = {}  # tensor → [out of range, total]
    rng = np.random.default_rng(0)
    exposed: dict[str, list[np.ndarray]] = {n: [] for n in ref.names}
    for feeds, a in fp32.batches({*pairs.values(), *(ranges or {})},
                                 stage="layerwise FP32 vs INT8 (diagnostic)"):
        b = {**feeds, **run_by_name(int8_session, feeds)}
        for name in ref.names:
            exposed[name].append(b[name])
        for int8_name, name in pairs.items():
            if int8_name in b and name in a:
                errors.setdefault(name, RunningError(Tolerance(0.0, 0.0))).update(b[int8_name], a[name], rng)
        for name, (low, high) in (ranges or {}).items():
            if name in a:
                counts = outside.setdefault(name, [0, 0])
                counts[0] += int(((a[name] < low) | (a[name] > high)).sum())
                counts[1] += a[name].size
        del a, b
    unfused = compare(ref, {n: np.concatenate(v) for n, v in exposed.items()})
    return Layerwise(_layer_rows(fp32.values, errors, data), {k: v[0] / max(v[1], 1) for k, v in outside.items()},
                     unfused.drop)


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
